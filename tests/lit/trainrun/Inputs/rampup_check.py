#!/usr/bin/env python3
"""rampup_check.py LOG LOSSES --gbs G --mbs M --dp D --rampup START INCR SAMPLES
   --train-samples T --lr X --lr-warmup-samples W [--min-lr Y] [--decrease]

Checks a trainrun log (--log-interval 1) and its --dump-dir losses.txt against Megatron's
batch-size ramp-up, written here from its Python (num_microbatches_calculator.py,
training.py update_train_iters, the train loop's consumed_train_samples and the
OptimizerParamScheduler's linear warmup/decay on the samples axis), independently of trainc's
C++: the number of iterations, each iteration's consumed samples and global batch size, and the
learning rate each iteration ran with. Prints one line per batch size and "ok: ..."."""
import argparse, re, sys

ap = argparse.ArgumentParser()
ap.add_argument("log"); ap.add_argument("losses")
ap.add_argument("--gbs", type=int, required=True); ap.add_argument("--mbs", type=int, required=True)
ap.add_argument("--dp", type=int, required=True)
ap.add_argument("--rampup", type=int, nargs=3, required=True)
ap.add_argument("--train-samples", type=int, required=True)
ap.add_argument("--lr", type=float, required=True); ap.add_argument("--min-lr", type=float, default=0.0)
ap.add_argument("--lr-warmup-samples", type=int, required=True)
ap.add_argument("--decrease", action="store_true")
a = ap.parse_args()
start, incr, ramp = a.rampup
unit = a.mbs * a.dp

def current(consumed):
    """Megatron's current_global_batch_size after update(consumed)."""
    if consumed > ramp:
        return a.gbs
    per_increment = ramp / ((a.gbs - start) // incr)
    return start + int(consumed / per_increment) * incr

def running(consumed):
    g = current(consumed)
    if a.decrease:
        return (g // unit) * unit
    assert g % unit == 0, g
    return g

# update_train_iters
iters, consumed = 0, 0
while consumed <= ramp:
    consumed += current(consumed)
    iters += 1
iters += (a.train_samples - consumed) // a.gbs

def lr_at(samples):
    """OptimizerParamScheduler.get_lr, linear style, decay over --train-samples."""
    w, d = a.lr_warmup_samples, a.train_samples
    if w > 0 and samples <= w:
        return a.lr * samples / w
    if samples > d:
        return a.min_lr
    ratio = (samples - w) / (d - w)
    return a.min_lr + (1.0 - ratio) * (a.lr - a.min_lr)

pat = re.compile(r"iteration\s+(\d+)/\s*(\d+) \| consumed samples:\s+(\d+) \|.*"
                 r"global batch size:\s+(\d+) \|")
logged = [tuple(int(x) for x in m.groups()) for m in map(pat.search, open(a.log)) if m]
lrs = {int(l.split()[0]): float(l.split()[3]) for l in open(a.losses) if l.strip()}
if not logged:
    print("no iteration lines in", a.log); sys.exit(1)
consumed, phases = 0, []
for it in range(1, iters + 1):
    g = running(consumed)
    if not phases or phases[-1][0] != g:
        phases.append([g, it, it])
    phases[-1][2] = it
    lr = lr_at(consumed)  # scheduled samples = consumed (no skipped iteration here)
    consumed += g
    line = logged[it - 1] if it - 1 < len(logged) else None
    want = (it, iters, consumed, g)
    if line != want:
        print("iteration %d: logged %s, Megatron's calculator gives %s (iteration/total, consumed, "
              "global batch size)" % (it, line, want)); sys.exit(1)
    if abs(lrs.get(it, float("nan")) - lr) > 1e-12 * max(1.0, abs(lr)) or it not in lrs:
        print("iteration %d: lr %r, expected %r" % (it, lrs.get(it), lr)); sys.exit(1)
if len(logged) != iters:
    print("logged %d iterations, Megatron's update_train_iters gives %d" % (len(logged), iters))
    sys.exit(1)
for g, first, last in phases:
    print("global batch size %d (%d microbatches): iterations %d-%d" % (g, g // unit, first, last))
print("ok: %d iterations, %d consumed samples, as Megatron's calculator" % (iters, consumed))
