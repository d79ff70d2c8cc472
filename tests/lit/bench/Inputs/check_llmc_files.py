#!/usr/bin/python3
"""Reads back what bench/llmc_prepare.py wrote for the stand-in llm.c tree (Inputs/llmc-src:
model.bin, data/train.bin, data/val.bin, tokenizer.bin; B 2, T 8, 3 validation batches) and
checks it against llm.c's formats and the expected shape, computed here on their own:

  checkpoint  256 int32 (20240326, 3, maxT, V, L, NH, C, Vp, zeros), then fp32 tensors wte (Vp, C),
              wpe (maxT, C), ln1w, ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C),
              attprojb, ln2w, ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C),
              fcprojb (L, C), lnfw, lnfb (C), and nothing after them;
  init        layer-norm weights 1, biases 0, wte's padded rows 0; wte, wpe, qkvw, fcw normal with
              std 0.02, attprojw and fcprojw 0.02 / sqrt(2 L) (sample std and mean within 4
              standard errors);
  tokens      256 int32 (20240520, 1, count), then count uint16, count = batches * B * T + 1,
              every token below V (or equal to the --text file's bytes, cycled);
  tokenizer   256 uint32 (20240328, 2, V, EOT = V - 1), then V tokens as (length >= 1, bytes).

usage: check_llmc_files.py OUT L C NH V Vp maxT TRAIN_BATCHES [--plan DIR] [--text FILE]
Prints "ok: ..." per check; exits 1 with "FAIL: ..." on the first mismatch.
"""
import json
import math
import os
import sys

import numpy as np

B, T, VAL_BATCHES = 2, 8, 3


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def header(path, dtype):
    with open(path, "rb") as f:
        return np.frombuffer(f.read(256 * 4), dtype=dtype), os.path.getsize(path)


def check_checkpoint(out, L, C, NH, V, Vp, maxT):
    h, size = header(os.path.join(out, "model.bin"), np.int32)
    want = [20240326, 3, maxT, V, L, NH, C, Vp]
    if list(h[:8]) != want or h[8:].any():
        fail(f"checkpoint header {list(h[:8])}, expected {want} then zeros")
    shapes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C),
              ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C), ("attprojw", L * C * C),
              ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C),
              ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C), ("lnfw", C),
              ("lnfb", C)]
    total = sum(n for _, n in shapes)
    if size != 1024 + 4 * total:
        fail(f"checkpoint is {size} bytes, expected 1024 + 4 x {total}")
    values = np.fromfile(os.path.join(out, "model.bin"), dtype=np.float32, offset=1024)
    at = 0
    for name, n in shapes:
        x = values[at:at + n].astype(np.float64)
        at += n
        if name == "wte":
            if x[V * C:].any():
                fail("wte's padded rows are not 0")
            x = x[:V * C]
        if name.endswith("b"):
            if x.any():
                fail(f"{name} is not all 0")
        elif name in ("ln1w", "ln2w", "lnfw"):
            if (x != 1).any():
                fail(f"{name} is not all 1")
        else:
            std = 0.02 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 0.02
            # 4 standard errors: of the sample std (std / sqrt(2 n)) and of the mean.
            if abs(x.std() / std - 1) > 4 / math.sqrt(2 * len(x)) or \
                    abs(x.mean()) > 4 * std / math.sqrt(len(x)):
                fail(f"{name}: mean {x.mean():.3g}, std {x.std():.4g}, expected 0 and {std:.4g}")
    print(f"ok: checkpoint L {L} C {C} NH {NH} V {V} Vp {Vp} maxT {maxT}: {total} parameters")
    return total


def check_tokens(path, count, V, text):
    h, size = header(path, np.int32)
    if list(h[:3]) != [20240520, 1, count] or size != 1024 + 2 * count:
        fail(f"{path}: header {list(h[:3])}, {size} bytes; expected [20240520, 1, {count}], "
             f"{1024 + 2 * count} bytes")
    tokens = np.fromfile(path, dtype=np.uint16, offset=1024)
    if tokens.max() >= V:
        fail(f"{path}: token {tokens.max()} >= vocab {V}")
    if text is not None and not np.array_equal(tokens, np.resize(text, count)):
        fail(f"{path}: tokens are not the text's bytes")
    return tokens


def check_tokenizer(path, V):
    h, size = header(path, np.uint32)
    if list(h[:4]) != [20240328, 2, V, V - 1]:
        fail(f"tokenizer header {list(h[:4])}, expected [20240328, 2, {V}, {V - 1}]")
    with open(path, "rb") as f:
        data = f.read()[1024:]
    at = 0
    for i in range(V):
        if at >= len(data) or data[at] == 0:
            fail(f"tokenizer: token {i} missing or empty")
        at += 1 + data[at]
    if at != len(data):
        fail(f"tokenizer: {len(data) - at} bytes after the {V} tokens")


def main():
    args = sys.argv[1:]
    out = args[0]
    L, C, NH, V, Vp, maxT, batches = map(int, args[1:8])
    opts = dict(zip(args[8::2], args[9::2]))
    total = check_checkpoint(out, L, C, NH, V, Vp, maxT)
    if "--plan" in opts:
        with open(os.path.join(opts["--plan"], "plan.json")) as f:
            planned = json.load(f)["num_parameters"]
        if planned != total:
            fail(f"the plan has {planned} parameters, the checkpoint {total}")
        print(f"ok: trainc's plan has the same {planned} parameters")
    text = None
    if "--text" in opts:
        data = np.fromfile(opts["--text"], dtype=np.uint8)
        cut = len(data) * 9 // 10
        text = (data[:cut], data[cut:])
    train = check_tokens(os.path.join(out, "data/train.bin"), batches * B * T + 1, V,
                         None if text is None else text[0])
    check_tokens(os.path.join(out, "data/val.bin"), VAL_BATCHES * B * T + 1, V,
                 None if text is None else text[1])
    if text is None and len(np.unique(train)) < min(V, len(train)) // 2:
        fail("train tokens are not spread over the vocabulary")
    print(f"ok: tokens {batches * B * T + 1} train, {VAL_BATCHES * B * T + 1} val, below {V}")
    check_tokenizer(os.path.join(out, "tokenizer.bin"), V)
    print(f"ok: tokenizer of {V} tokens, EOT {V - 1}")


if __name__ == "__main__":
    main()
