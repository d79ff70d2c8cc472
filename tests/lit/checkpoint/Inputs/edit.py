#!/usr/bin/env python3
"""Corrupts a checkpoint file for the tests.

  edit.py replace FILE OLD NEW   replace the first occurrence of the bytes OLD with NEW
  edit.py flip-last FILE         invert the last byte (inside the last tensor's data)
  edit.py json FILE STATEMENT    run the Python STATEMENT on the parsed JSON file `d`, write it back
"""
import json
import sys

mode, path = sys.argv[1], sys.argv[2]
if mode == "json":
    d = json.load(open(path))
    exec(sys.argv[3])
    json.dump(d, open(path, "w"), indent=1)
    sys.exit(0)
data = bytearray(open(path, "rb").read())
if mode == "replace":
    old, new = sys.argv[3].encode(), sys.argv[4].encode()
    i = data.find(old)
    if i < 0:
        sys.exit(f"edit.py: {old!r} not in {path}")
    data[i:i + len(old)] = new
elif mode == "flip-last":
    data[-1] ^= 0xFF
else:
    sys.exit(f"edit.py: unknown mode {mode}")
open(path, "wb").write(data)
