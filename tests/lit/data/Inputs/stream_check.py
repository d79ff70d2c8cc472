"""Checks trainc's per-rank --dump-dir batches against Megatron's sample stream, computed
independently: the GPTDataset indices from tests/data/megatron_gpt_reference.py (numpy) over
PREFIX.idx/.bin, and Megatron's pretraining sampler (global batch g holds samples
[g * gbs, (g + 1) * gbs); data-parallel rank r reads microbatch m's samples
[(m * dp + r) * mbs, (m * dp + r + 1) * mbs) of it).

    stream_check.py PREFIX SEQ SEED NUM_SAMPLES MBS DP GBS FIRST_ITER DUMP...

DUMP r is rank r's batches file (iterations FIRST_ITER.. of the run, int32 samples of SEQ + 1
tokens each); prints 'stream: N iterations x DP ranks match Megatron's order (E epochs)'.
"""
import os
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "data"))
import megatron_gpt_reference as ref  # noqa: E402

prefix, seq, seed, num_samples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
mbs, dp, gbs, first = (int(x) for x in sys.argv[5:9])
dumps = sys.argv[9:]
assert len(dumps) == dp
lengths = ref.read_sequence_lengths(prefix)
epochs, _, doc, smp, sh = ref.build(lengths, 0, lengths.shape[0], num_samples, seq, seed)
with open(prefix + ".idx", "rb") as f:
    f.read(9 + 8)
    code = f.read(1)[0]
    count, _ = struct.unpack("<QQ", f.read(16))
    off = f.tell()
pointers = np.fromfile(prefix + ".idx", dtype=np.int64, count=count, offset=off + 4 * count)
dtype = {1: np.uint8, 8: np.uint16, 4: np.int32}[code]
tokens = np.fromfile(prefix + ".bin", dtype=dtype)
size = np.dtype(dtype).itemsize


def sample(i):
    j = int(sh[i])
    (d0, o0), (d1, o1) = smp[j], smp[j + 1]
    out = []
    for d in range(d0, d1 + 1):
        s = int(doc[d])
        base = pointers[s] // size
        lo = o0 if d == d0 else 0
        hi = o1 + 1 if d == d1 else int(lengths[s])
        out += tokens[base + lo : base + hi].tolist()
    assert len(out) == seq + 1
    return out


per_iter = gbs // dp
iters = None
for r, path in enumerate(dumps):
    got = np.fromfile(path, dtype=np.int32).reshape(-1, seq + 1)
    assert got.shape[0] % per_iter == 0, got.shape
    n = got.shape[0] // per_iter
    iters = n if iters is None else iters
    assert n == iters, (n, iters)
    for it in range(n):
        g = first - 1 + it
        for m in range(gbs // (mbs * dp)):
            for b in range(mbs):
                want = sample(g * gbs + (m * dp + r) * mbs + b)
                row = got[it * per_iter + m * mbs + b].tolist()
                assert row == want, ("iteration", first + it, "rank", r, m, b, row[:8], want[:8])
print("stream: %d iterations x %d ranks match Megatron's order (%d epochs)" % (iters, dp, epochs))
