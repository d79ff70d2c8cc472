#!/usr/bin/env python3
"""compare_weights_l2.py A B RTOL: checks that two safetensors files hold the same tensors
(names, shapes) and that every tensor's relative L2 difference ||a - b|| / max(||a||, ||b||)
is at most RTOL (the tensor-parallel issue's "every gathered parameter 1e-5 relative L2");
prints "tensors equal within RTOL (relative L2): N tensors, max D". --skip REGEX leaves out the
tensors whose name matches (counted in "skipped K"): attention's key bias has a zero gradient in
exact arithmetic (softmax is invariant to adding q.b to every key), so Adam turns its rounding
noise into lr-sized steps of random sign in every plan. B may list several files separated by
commas (one per pipeline stage: each holds its stage's tensors); their union is compared with A,
and a tensor in two of them (the tied word embedding's copies on the first and last stage) must
be bitwise equal there."""
import re
import json
import struct
import sys

import numpy as np


def read(path):
    dtypes = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": np.uint16}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()

    def tensor(t):
        x = np.frombuffer(data[t["data_offsets"][0]:t["data_offsets"][1]], dtype=dtypes[t["dtype"]])
        if t["dtype"] == "BF16":  # the upper half of an f32
            x = (x.astype(np.uint32) << 16).view(np.float32)
        return x.reshape(t["shape"]).astype(np.float64)
    return {name: tensor(t) for name, t in header.items() if name != "__metadata__"}


a, rtol = read(sys.argv[1]), float(sys.argv[3])
b = {}
for path in sys.argv[2].split(","):
    part = read(path)
    differ = sorted(n for n in set(part) & set(b) if not np.array_equal(part[n], b[n]))
    if differ:
        print("copies in %s that are not bitwise equal: %s" % (sys.argv[2], differ))
        sys.exit(1)
    b.update(part)
skip = re.compile(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--skip" else None
skipped = 0
if sorted(a) != sorted(b):
    print("different tensors: %s vs %s" % (sorted(a), sorted(b)))
    sys.exit(1)
worst = 0.0
for name in sorted(a):
    x, y = a[name], b[name]
    if skip and skip.search(name):
        skipped += 1
        continue
    if x.shape != y.shape:
        print("%s: shape %s vs %s" % (name, x.shape, y.shape))
        sys.exit(1)
    d = float(np.linalg.norm(x - y)) / max(float(np.linalg.norm(x)), float(np.linalg.norm(y)), 1e-30)
    worst = max(worst, d)
    if d > rtol:
        print("%s: relative L2 difference %g" % (name, d))
        sys.exit(1)
print("tensors equal within %g (relative L2): %d tensors, max %.3g%s"
      % (rtol, len(a) - skipped, worst, ", skipped %d" % skipped if skip else ""))
