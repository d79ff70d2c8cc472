#!/usr/bin/env python3
"""Reads a trainc checkpoint independently of the runtime and prints every global tensor.

  ckpt_tensors.py ITERATION_DIR

Assembles each tensor of metadata.json from its shards (each a flat range [flat_begin, flat_end)
of the row-major box (box_start, box_size), placed element by element at its global index; the
shards must cover every element once) and prints one line per tensor,
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
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    for s in t["shards"]:
        bstart = [int(x) for x in s.get("box_start", [0] * len(shape))]
        bsize = [int(x) for x in s["box_size"]]
        h, start = header(s["file"])
        e = h[s["key"]]
        b, en = int(s["flat_begin"]), int(s["flat_end"])
        with open(os.path.join(d, s["file"]), "rb") as f:
            f.seek(start + e["data_offsets"][0])
            data = f.read((en - b) * esize)
        if bsize == shape:
            out[b * esize:en * esize] = data
        else:
            # Row by row of the box's last dim: each row is contiguous in the global tensor.
            row = bsize[-1]
            i = b
            while i < en:
                r, c = divmod(i, row)
                idx = [0] * len(shape)
                for k in range(len(shape) - 2, -1, -1):
                    r, idx[k] = divmod(r, bsize[k])
                g = sum((bstart[k] + idx[k]) * strides[k] for k in range(len(shape) - 1))
                g += bstart[-1] + c
                n = min(row - c, en - i)
                out[g * esize:(g + n) * esize] = data[(i - b) * esize:(i - b + n) * esize]
                i += n
        covered += en - b
    assert covered == numel, f"{name}: {covered} of {numel} elements"
    print(name, t["dtype"], shape, hashlib.sha256(out).hexdigest())
