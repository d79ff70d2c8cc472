"""mask_stats.py BATCHES SEQ EOD MBS: from a --dump-dir batches file (int32 samples of SEQ + 1
tokens), counts the EOD inputs (the tokens --eod-mask-loss masks) per microbatch of MBS samples;
prints 'ragged: ...' when in every iteration (8 samples) the microbatches' counts are not all
equal, else the counts."""
import sys

import numpy as np

path, seq, eod, mbs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
b = np.fromfile(path, dtype=np.int32).reshape(-1, seq + 1)[:, :seq]
counts = (b == eod).reshape(-1, mbs, seq).sum(axis=(1, 2))
per_iter = counts.reshape(-1, 8 // mbs)
if all(len(set(row.tolist())) > 1 for row in per_iter):
    print("ragged: every iteration's microbatches have different masked-token counts")
else:
    print("not ragged:", per_iter.tolist())
