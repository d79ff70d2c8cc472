#!/usr/bin/env python3
"""compare_losses.py A B RTOL: checks that two trainrun --dump-dir losses.txt files (lines
"iteration loss grad_norm lr") hold the same iterations with losses and grad norms equal within a
relative RTOL; prints "equal within RTOL: N iterations, max relative difference D"."""
import sys

def read(path):
    return [tuple(float(x) for x in line.split()) for line in open(path) if line.strip()]

a, b, rtol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
if len(a) != len(b) or not a:
    print("different lengths: %d vs %d" % (len(a), len(b))); sys.exit(1)
worst = 0.0
for x, y in zip(a, b):
    if x[0] != y[0]:
        print("iterations differ: %d vs %d" % (x[0], y[0])); sys.exit(1)
    for u, v in ((x[1], y[1]), (x[2], y[2])):
        d = abs(u - v) / max(abs(u), abs(v), 1e-30)
        worst = max(worst, d)
        if d > rtol:
            print("iteration %d: %r vs %r (relative %g)" % (x[0], u, v, d)); sys.exit(1)
print("equal within %g: %d iterations, max relative difference %.3g" % (rtol, len(a), worst))
