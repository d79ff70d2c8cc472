#!/usr/bin/env python3
"""Checks --log-params-norm and --log-num-zeros-in-grad against numpy on the dumped values.

Usage: check_norms.py PLAN_DIR DUMP_DIR LOG [TB_TSV]

PLAN_DIR/plan.json gives the model (vocab, padded vocab, hidden, tied or not, data-parallel
size); DUMP_DIR is trainrun --dump-dir's output of the same run (final_weights*.safetensors,
batches*.bin: every sample of every iteration, int32, seq + 1 tokens each); LOG the training log
with one line per iteration (--log-interval 1); TB_TSV (optional) read_tensorboard.py's output.

  params norm (last iteration) = sqrt(sum of squares of the final weights), read with numpy from
    the safetensors file (its own parser), to the log's 3 decimals and TensorBoard's float32.
  num zeros (every iteration) = the gradient rows that are zero by construction: the padded
    vocabulary rows (masked out of the softmax: zero output-layer gradient) and, with untied
    embeddings, the embedding rows of every token id absent from the iteration's global batch
    inputs (the tied embedding's rows get the output layer's gradient). x hidden size.
Prints "ok ..." lines; exits 1 on a mismatch.
"""
import glob
import json
import math
import re
import struct
import sys

import numpy as np


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "F64": np.float64}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[base + a:base + b], dtype=dt).reshape(t["shape"])
    return out


def main():
    plan_dir, dump_dir, log = sys.argv[1], sys.argv[2], sys.argv[3]
    plan = json.load(open(plan_dir + "/plan.json"))
    m = plan["model"]
    vocab, padded, hidden = int(m["vocab_size"]), int(m["padded_vocab_size"]), int(m["hidden_size"])
    seq = int(m["seq_length"])
    tied = m["untie_embeddings_and_output_weights"] != "true"
    bad = 0

    weights = read_safetensors(dump_dir + "/final_weights.safetensors")
    norm = math.sqrt(sum(float(np.sum(w.astype(np.float64) ** 2)) for w in weights.values()))
    text = re.sub(r"^\[rank \d+\] ", "", open(log).read(), flags=re.M)
    lines = [l for l in text.splitlines() if " iteration " in l and "params norm" in l]
    logged = [float(re.search(r"params norm: ([0-9.]+) \|", l).group(1)) for l in lines]
    ok = abs(logged[-1] - norm) <= 0.0005 + 1e-9
    print(f"{'ok' if ok else 'MISMATCH'} params norm: log {logged[-1]}, numpy {norm:.6f}")
    bad += not ok
    if len(sys.argv) > 4:
        tb = [r for r in (l.split() for l in open(sys.argv[4]))
              if r[0] == "params-norm" and r[1].isdigit()]
        last = max(tb, key=lambda r: int(r[1]))
        ok = abs(float(last[2]) - norm) <= 5e-6 * norm  # read_tensorboard prints %.6g
        print(f"{'ok' if ok else 'MISMATCH'} params-norm (TensorBoard): {last[2]}, numpy "
              f"{norm:.6f}")
        bad += not ok

    # Every rank's dumped samples, iteration by iteration (rank r's file: batches.rank<r>.bin).
    files = sorted(glob.glob(dump_dir + "/batches*.bin"))
    iters = len(lines)
    per_iter = [set() for _ in range(iters)]
    for f in files:
        a = np.fromfile(f, dtype=np.int32).reshape(iters, -1, seq + 1)
        for i in range(iters):
            per_iter[i].update(int(t) for t in a[i, :, :seq].ravel())
    zeros = [float(re.search(r"num zeros: ([0-9.]+) \|", l).group(1)) for l in lines]
    for i in range(iters):
        want = (padded - vocab) * hidden
        if not tied:
            want += (padded - len(per_iter[i])) * hidden
        ok = zeros[i] == want
        print(f"{'ok' if ok else 'MISMATCH'} iteration {i + 1}: num zeros {zeros[i]:.0f}, closed "
              f"form {want} ({len(per_iter[i])} distinct input tokens)")
        bad += not ok
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
