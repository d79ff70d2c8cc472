#!/usr/bin/env python3
"""compare_ckpt.py A B [KIND=RTOL ...]: compares two trainc checkpoints (iteration directories,
docs/checkpoint.md) saved under any layouts, independently of the runtime.

Each global tensor is assembled from its shards (box_start / box_size / flat_begin / flat_end;
BF16 and F16 widened exactly to float64). Tensors are grouped by kind: "param" (the parameters),
"master" (optimizer.state.fp32_param.*), "exp_avg", "exp_avg_sq". For each KIND=RTOL given, every
tensor of that kind must have relative L2 difference ||a - b|| / max(||a||, ||b||) <= RTOL.
Prints one line per kind compared: "<kind>: N tensors, max relative L2 D (<name>) within RTOL"
or "... exceeds RTOL" (exit 1). Two extra checks, printed first:
  - both checkpoints hold the same tensor names and global shapes (exit 1 otherwise);
  - in each checkpoint every 16-bit parameter equals the rounding to nearest even of its master
    weights, bitwise: "params == bf16(master) bitwise: N elements in A, M in B" (exit 1 with the
    first differing element otherwise).
"""
import json
import os
import re
import struct
import sys

import numpy as np

DT = {"F32": np.float32, "F64": np.float64, "BF16": np.uint16, "F16": np.float16}


def load(d):
    meta = json.load(open(os.path.join(d, "metadata.json")))
    headers = {}

    def header(name):
        if name not in headers:
            with open(os.path.join(d, name), "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                headers[name] = (json.loads(f.read(n)), 8 + n)
        return headers[name]

    out = {}
    for name, t in meta["tensors"].items():
        shape = [int(x) for x in t["global_shape"]]
        dt = DT[t["dtype"]]
        g = np.zeros(shape, dtype=dt)
        seen = np.zeros(shape, dtype=bool)
        for s in t["shards"]:
            bstart = [int(x) for x in s.get("box_start", [0] * len(shape))]
            bsize = [int(x) for x in s["box_size"]]
            h, start = header(s["file"])
            e = h[s["key"]]
            b, en = int(s["flat_begin"]), int(s["flat_end"])
            with open(os.path.join(d, s["file"]), "rb") as f:
                f.seek(start + e["data_offsets"][0])
                piece = np.frombuffer(f.read((en - b) * np.dtype(dt).itemsize), dtype=dt)
            box = tuple(slice(a, a + n) for a, n in zip(bstart, bsize))
            flat = g[box].reshape(-1).copy()
            flat[b:en] = piece
            g[box] = flat.reshape(bsize)
            fs = seen[box].reshape(-1).copy()
            if fs[b:en].any():
                sys.exit(f"{d}: {name}: an element is stored twice")
            fs[b:en] = True
            seen[box] = fs.reshape(bsize)
        if not seen.all():
            sys.exit(f"{d}: {name}: {int((~seen).sum())} elements not stored")
        out[name] = (t["dtype"], g)
    return out


def as_f64(dtype, x):
    if dtype == "BF16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def bf16_rne(m):
    u = m.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(m)
    r = r.astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def kind(name):
    for k, p in (("master", "optimizer.state.fp32_param."), ("exp_avg_sq", "optimizer.state.exp_avg_sq."),
                 ("exp_avg", "optimizer.state.exp_avg.")):
        if name.startswith(p):
            return k
    return "param"


def rounding(ck, label):
    n = 0
    for name, (dtype, x) in sorted(ck.items()):
        if kind(name) != "param" or dtype not in ("BF16", "F16"):
            continue
        m = ck.get("optimizer.state.fp32_param." + name)
        if m is None:
            sys.exit(f"{label}: {name} has no master weights")
        want = bf16_rne(m[1]) if dtype == "BF16" else m[1].astype(np.float16)
        got = x if dtype == "BF16" else x
        bad = np.flatnonzero((got.view(np.uint16) != want.view(np.uint16)).reshape(-1))
        if bad.size:
            i = int(bad[0])
            sys.exit(f"{label}: {name}[{i}] is not the rounding of its master "
                     f"{m[1].reshape(-1)[i]!r}")
        n += x.size
    return n


def main():
    a_dir, b_dir = sys.argv[1], sys.argv[2]
    tols = {}
    for arg in sys.argv[3:]:
        k, v = arg.split("=")
        if k not in ("param", "master", "exp_avg", "exp_avg_sq"):
            sys.exit(f"unknown kind {k!r}: expected param, master, exp_avg or exp_avg_sq")
        tols[k] = float(v)
    a, b = load(a_dir), load(b_dir)
    if sorted(a) != sorted(b):
        sys.exit(f"different tensors: only in A {sorted(set(a) - set(b))}, only in B {sorted(set(b) - set(a))}")
    for n in a:
        if a[n][1].shape != b[n][1].shape:
            sys.exit(f"{n}: shape {a[n][1].shape} vs {b[n][1].shape}")
    print(f"params == bf16(master) bitwise: {rounding(a, 'A')} elements in A, {rounding(b, 'B')} in B")
    fail = False
    for k, tol in tols.items():
        worst, wname, count = 0.0, "", 0
        for n in sorted(a):
            if kind(n) != k:
                continue
            x, y = as_f64(*a[n]), as_f64(*b[n])
            den = max(np.linalg.norm(x), np.linalg.norm(y))
            d = 0.0 if den == 0 else float(np.linalg.norm(x - y) / den)
            count += 1
            if d >= worst:
                worst, wname = d, n
        ok = worst <= tol
        fail |= not ok
        print(f"{k}: {count} tensors, max relative L2 {worst:.3g} ({wname}) "
              f"{'within' if ok else 'exceeds'} {tol:g}")
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
