#!/usr/bin/env python3
"""Reads a trainc checkpoint independently of the runtime and prints every global tensor.

  ckpt_tensors.py ITERATION_DIR

Assembles each tensor of metadata.json from its shards (whole-tensor boxes: the flat ranges are
concatenated in order; the shards must cover every element once) and prints one line per tensor,
sorted: "<name> <dtype> <shape> <sha256 of the assembled little-endian bytes>". Two checkpoints
saved under different layouts print the same lines when they hold the same values.
"""
import hashlib
import json
import os
import struct
import sys

SIZES = {"F32": 4, "F64": 8}

d = sys.argv[1]
meta = json.load(open(os.path.join(d, "metadata.json")))
headers = {}


def header(name):
    if name not in headers:
        with open(os.path.join(d, name), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            headers[name] = (json.loads(f.read(n)), 8 + n)
    return headers[name]


for name in sorted(meta["tensors"]):
    t = meta["tensors"][name]
    shape = [int(x) for x in t["global_shape"]]
    numel = 1
    for x in shape:
        numel *= x
    esize = SIZES[t["dtype"]]
    out = bytearray(numel * esize)
    covered = 0
    for s in t["shards"]:
        assert [int(x) for x in s["box_size"]] == shape, f"{name}: not a whole-tensor box"
        h, start = header(s["file"])
        e = h[s["key"]]
        b, en = int(s["flat_begin"]), int(s["flat_end"])
        with open(os.path.join(d, s["file"]), "rb") as f:
            f.seek(start + e["data_offsets"][0])
            out[b * esize:en * esize] = f.read((en - b) * esize)
        covered += en - b
    assert covered == numel, f"{name}: {covered} of {numel} elements"
    print(name, t["dtype"], shape, hashlib.sha256(out).hexdigest())
