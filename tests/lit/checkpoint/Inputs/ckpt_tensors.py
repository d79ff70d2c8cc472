#!/usr/bin/env python3
"""Reads a trainc checkpoint independently of the runtime and prints every global tensor.

  ckpt_tensors.py ITERATION_DIR

Assembles each tensor of metadata.json from its shards with tests/data/compare_ckpt.py's reader
(each shard a flat range [flat_begin, flat_end) of the row-major box (box_start, box_size); every
element stored exactly once, else it exits naming the tensor) and prints one line per tensor,
sorted: "<name> <dtype> <shape> <sha256 of the assembled little-endian bytes>". Two checkpoints
saved under different layouts print the same lines when they hold the same values.
"""
import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "data"))
from compare_ckpt import load  # noqa: E402

for name, (dtype, g) in sorted(load(sys.argv[1]).items()):
    data = g.astype(g.dtype.newbyteorder("<"), copy=False).tobytes()
    print(name, dtype, list(g.shape), hashlib.sha256(data).hexdigest())
