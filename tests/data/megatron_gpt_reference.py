#!/usr/bin/env python3
"""An independent reference of Megatron-LM's GPTDataset index construction, written with numpy.

It follows megatron/core/datasets (gpt_dataset.py: _get_num_epochs, the separate-last-epoch rule,
_build_document_index, _build_shuffle_index; helpers.cpp: build_sample_idx with
drop_last_partial_sequence; blended_megatron_dataset_builder.py / utils.py: the split ranges) and
uses numpy.random.RandomState itself, so that trainc's C++ port can be compared index by index.

    megatron_gpt_reference.py PREFIX SPLIT SEQ_LENGTH SEED N_TRAIN N_VALID N_TEST OUT

reads PREFIX.idx (numpy), and writes OUT: for each of train, valid, test an int64 header
(present, num_epochs, separate_final_epoch, len(document_index), len(sample_index) pairs,
len(shuffle_index)) followed by the three arrays as int64. N_* = 0 means one epoch (None).
"""
import re
import struct
import sys

import numpy as np


def read_sequence_lengths(prefix):
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00"
        (version,) = struct.unpack("<Q", f.read(8))
        assert version == 1
        f.read(1)
        (count,) = struct.unpack("<Q", f.read(8))
        f.read(8)
        offset = f.tell()
    return np.memmap(prefix + ".idx", dtype=np.int32, mode="r", offset=offset, shape=(count,))


def split_ranges(split, n):
    w = [float(x) for x in re.findall(r"[.0-9]+", split)]
    w += [0.0] * (3 - len(w))
    w = np.array(w, dtype=np.float64)
    w = (w / np.sum(w)).tolist()
    bounds = [0]
    for x in w:
        bounds.append(bounds[-1] + x)
    out = []
    for s in range(3):
        lo, hi = bounds[s], bounds[s + 1]
        if lo == hi:
            out.append(None)
        else:
            out.append((int(round(lo * float(n))), int(round(hi * float(n)))))
    return out


def document_index(docs, epochs, rng, separate):
    if not separate or epochs == 1:
        idx = np.tile(np.asarray(docs), epochs).astype(np.int32)
        rng.shuffle(idx)
        return idx
    first = document_index(docs, epochs - 1, rng, False)
    last = document_index(docs, 1, rng, False)
    return np.concatenate((first, last))


def sample_index(lengths, doc_idx, seq, epochs, tokens_per_epoch):
    n = (epochs * tokens_per_epoch - 1) // seq
    out = np.zeros((n + 1, 2), dtype=np.int64)
    pos, off = 0, 0
    for s in range(1, n + 1):
        need = seq + 1
        while need != 0:
            avail = int(lengths[doc_idx[pos]]) - off
            need -= avail
            if need <= 0:
                off += need + avail - 1
                need = 0
            else:
                pos += 1
                off = 0
        out[s] = (pos, off)
    return out


def shuffle_index(first, total, rng):
    dtype = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64
    a = np.arange(0, first, dtype=dtype)
    rng.shuffle(a)
    if first == total:
        return a
    b = np.arange(first, total, dtype=dtype)
    rng.shuffle(b)
    return np.concatenate((a, b))


def build(lengths, lo, hi, num_samples, seq, seed):
    docs = np.arange(lo, hi, dtype=np.int32)
    tokens = int(np.sum(lengths[docs]))
    epochs = 1
    if num_samples:
        total = tokens
        while total < num_samples * seq + 1:
            epochs += 1
            total += tokens
    separate = False
    sans_final = 0
    if epochs > 1:
        sans_final = ((epochs - 1) * tokens - 1) // seq
        from_final = num_samples - sans_final
        per_epoch = (tokens - 1) // seq
        separate = from_final < int(0.80 * per_epoch)
    rng = np.random.RandomState(seed)
    d = document_index(docs, epochs, rng, separate)
    s = sample_index(lengths, d, seq, epochs, tokens)
    if separate:
        sh = shuffle_index(sans_final, s.shape[0] - 1, rng)
    else:
        sh = shuffle_index(s.shape[0] - 1, s.shape[0] - 1, rng)
    return epochs, separate, d, s, sh


def main():
    prefix, split, seq, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sizes = [int(x) for x in sys.argv[5:8]]
    out_path = sys.argv[8]
    lengths = read_sequence_lengths(prefix)
    ranges = split_ranges(split, lengths.shape[0])
    with open(out_path, "wb") as out:
        for s in range(3):
            r = ranges[s]
            if r is None or r[0] == r[1]:
                out.write(np.array([0, 0, 0, 0, 0, 0], dtype=np.int64).tobytes())
                continue
            epochs, separate, d, smp, sh = build(lengths, r[0], r[1], sizes[s], seq, seed)
            head = [1, epochs, int(separate), d.shape[0], smp.shape[0], sh.shape[0]]
            out.write(np.array(head, dtype=np.int64).tobytes())
            out.write(d.astype(np.int64).tobytes())
            out.write(smp.astype(np.int64).tobytes())
            out.write(sh.astype(np.int64).tobytes())


if __name__ == "__main__":
    main()
