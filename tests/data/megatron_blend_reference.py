#!/usr/bin/env python3
"""An independent reference of Megatron-LM's blending (blended_megatron_dataset_builder.py:
_get_size_per_split_per_dataset with and without the mid-level surplus; blended_dataset.py: the
weights normalised again; helpers.cpp build_blending_indices: the greedy assignment of each sample
to the dataset whose achieved count lags its weight most), written with numpy and Python floats.

    megatron_blend_reference.py WEIGHTS SURPLUS N_TRAIN N_VALID N_TEST OUT

WEIGHTS is comma separated (unnormalised). OUT gets, per split, int64: blended size, the number
of datasets D, D target sizes, D buffer sizes (with the surplus), then dataset_index and
dataset_sample_index (size each).
"""
import math
import sys

import numpy as np


def normalize(weights):
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def sizes_per_dataset(weights, target, surplus):
    return [int(math.ceil(math.ceil(target * w) * (1 + surplus))) for w in weights]


def blending_indices(weights, size):
    dataset_index = np.zeros(size, dtype=np.int16)
    sample_index = np.zeros(size, dtype=np.int64)
    used = [0] * len(weights)
    for s in range(size):
        x = max(float(s), 1.0)
        errors = [w * x - float(u) for w, u in zip(weights, used)]
        best = 0
        for d in range(1, len(weights)):
            if errors[d] > errors[best]:
                best = d
        dataset_index[s] = best
        sample_index[s] = used[best]
        used[best] += 1
    return dataset_index, sample_index


def main():
    weights = normalize([float(x) for x in sys.argv[1].split(",")])
    surplus = float(sys.argv[2])
    targets = [int(x) for x in sys.argv[3:6]]
    out = []
    for t in targets:
        target = sizes_per_dataset(weights, t, 0.0)
        buffer = sizes_per_dataset(weights, t, surplus)
        size = sum(target)
        di, si = blending_indices(normalize(weights), size)
        out += [size, len(weights)] + target + buffer + di.astype(np.int64).tolist() + si.tolist()
    np.array(out, dtype=np.int64).tofile(sys.argv[6])


if __name__ == "__main__":
    main()
