"""Reads PREFIX.bin/.idx with numpy and checks that the byte tokens of every document, EOD (0)
removed, are the UTF-8 of the jsonl line's text; prints 'round trip: N documents'."""
import json
import struct
import sys

import numpy as np

jsonl, prefix = sys.argv[1], sys.argv[2]
with open(prefix + ".idx", "rb") as f:
    assert f.read(9) == b"MMIDIDX\x00\x00"
    f.read(8)
    code = f.read(1)[0]
    count, docs = struct.unpack("<QQ", f.read(16))
    off = f.tell()
assert code == 8, code
lengths = np.fromfile(prefix + ".idx", dtype=np.int32, count=count, offset=off)
pointers = np.fromfile(prefix + ".idx", dtype=np.int64, count=count, offset=off + 4 * count)
doc_idx = np.fromfile(prefix + ".idx", dtype=np.int64, count=docs, offset=off + 12 * count)
tokens = np.fromfile(prefix + ".bin", dtype=np.uint16)
texts = [json.loads(line)["text"] for line in open(jsonl, encoding="utf-8")]
assert len(texts) == docs - 1, (len(texts), docs)
for d, text in enumerate(texts):
    ids = []
    for s in range(doc_idx[d], doc_idx[d + 1]):
        ids += tokens[pointers[s] // 2 : pointers[s] // 2 + lengths[s]].tolist()
    want = list(text.encode("utf-8"))
    if want:
        want.append(0)
    assert ids == want, (d, ids[:20], want[:20])
print("round trip: %d documents" % len(texts))
