#!/usr/bin/env python3
"""close.py A B TOL: the losses.txt lines of A and B (iteration, lm loss, grad norm, lr) have
the same iterations and lm losses within relative TOL; prints the largest relative difference."""
import sys

a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert len(a) == len(b) and a, f"{len(a)} lines against {len(b)}"
worst = 0.0
for x, y in zip(a, b):
    assert x[0] == y[0], f"iteration {x[0]} against {y[0]}"
    la, lb = float(x[1]), float(y[1])
    worst = max(worst, abs(la - lb) / max(abs(la), abs(lb)))
print(f"{len(a)} iterations, largest relative lm loss difference {'within' if worst <= tol else 'ABOVE'} {tol}")
sys.exit(0 if worst <= tol else 1)
