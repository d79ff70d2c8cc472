#!/usr/bin/env python3
"""compare_safetensors.py A B RTOL: checks that two safetensors files hold the same tensors
(names, shapes) with values equal element-wise within |a - b| <= RTOL * max(|a|, |b|, 1e-3);
prints "tensors equal within RTOL: N tensors, E elements, max relative
difference D". Reads the format directly (8-byte little-endian header length, JSON header,
data) with numpy."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


a, b, rtol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
if sorted(a) != sorted(b):
    print("different tensors: %s vs %s" % (sorted(a), sorted(b)))
    sys.exit(1)
worst, elements = 0.0, 0
for name in sorted(a):
    x, y = a[name].astype(np.float64), b[name].astype(np.float64)
    if x.shape != y.shape:
        print("%s: shape %s vs %s" % (name, x.shape, y.shape))
        sys.exit(1)
    scale = np.maximum(np.maximum(np.abs(x), np.abs(y)), 1e-3)
    rel = np.abs(x - y) / scale
    elements += x.size
    if rel.size:
        worst = max(worst, float(rel.max()))
        if rel.max() > rtol:
            i = int(rel.argmax())
            print("%s[%d]: %r vs %r (relative %g)" % (name, i, x.flat[i], y.flat[i], rel.flat[i]))
            sys.exit(1)
print("tensors equal within %g: %d tensors, %d elements, max relative difference %.3g"
      % (rtol, len(a), elements, worst))
