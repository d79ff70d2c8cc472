"""Reads PREFIX.bin/.idx with numpy (Megatron's MMIDIDX layout) and checks that document d's ids
are line d of IDS (space-separated ids, e.g. spm_encode --output_format=id) followed by EOD (when
given and the line is not empty); prints 'ids match: N documents'."""
import struct
import sys

import numpy as np

ids_file, prefix = sys.argv[1], sys.argv[2]
eod = int(sys.argv[3]) if len(sys.argv) > 3 else None
dtypes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}
with open(prefix + ".idx", "rb") as f:
    assert f.read(9) == b"MMIDIDX\x00\x00"
    f.read(8)
    dtype = dtypes[f.read(1)[0]]
    count, docs = struct.unpack("<QQ", f.read(16))
    off = f.tell()
lengths = np.fromfile(prefix + ".idx", dtype=np.int32, count=count, offset=off)
pointers = np.fromfile(prefix + ".idx", dtype=np.int64, count=count, offset=off + 4 * count)
doc_idx = np.fromfile(prefix + ".idx", dtype=np.int64, count=docs, offset=off + 12 * count)
tokens = np.fromfile(prefix + ".bin", dtype=dtype)
size = np.dtype(dtype).itemsize
want = [[int(x) for x in line.split()] for line in open(ids_file)]
assert len(want) == docs - 1, (len(want), docs - 1)
for d, w in enumerate(want):
    got = []
    for s in range(doc_idx[d], doc_idx[d + 1]):
        got += tokens[pointers[s] // size : pointers[s] // size + lengths[s]].tolist()
    if w and eod is not None:
        w = w + [eod]
    assert got == w, (d, got[:20], w[:20])
print("ids match: %d documents" % len(want))
