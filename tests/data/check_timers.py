#!/usr/bin/env python3
"""Recomputes Megatron's timers from trainrun's Chrome traces and checks the printed ones.

Usage: check_timers.py LOG TRACE_DIR WORLD ITERATIONS

LOG holds one timers block of trainrun (--timing-log-level 2, one logging interval covering all
ITERATIONS, no evaluation); TRACE_DIR holds rank<r>.trace.json of the same run. This script
groups the trace's instruction events by the IR op that produced them (args.op) on its own --
the rules of docs/design.md "Timers", written again here -- and checks:
  * each rank: forward-backward >= forward-compute + backward-compute;
  * "(min, max)" lines: min and max over the ranks of the recomputed values (+-0.01 ms, the
    printed rounding);
  * "max" lines: the maximum; "all" blocks: each rank's value.
Prints one "ok ..." line per checked timer; exits 1 on a mismatch.
"""
import json
import re
import sys

ENTRY = "train_step"
SPAN = {
    "forward-backward": {"sched.fill_inputs", "sched.microbatch", "sched.forward",
                         "sched.backward", "sched.grad_sync_start", "sched.grad_sync_wait",
                         "sched.finalize_grads", "sched.reduce_losses", "sched.zero_losses",
                         "sched.accumulate_loss", "sched.accumulate_grad", "sched.loss_seed"},
    "optimizer": {"sched.clip_grad_norm", "sched.adamw", "sched.optimizer_step",
                  "sched.param_gather_start", "sched.param_gather_wait"},
}
SUM = {
    "forward-compute": ({"sched.forward"}, False),
    "backward-compute": ({"sched.backward"}, False),
    "batch-generator": ({"sched.fill_inputs"}, False),
    "all-grads-sync": ({"sched.grad_sync_start", "sched.grad_sync_wait", "sched.finalize_grads"},
                       False),
    "params-all-gather": ({"sched.param_gather_start", "sched.param_gather_wait"}, True),
    "optimizer-clip-main-grad": ({"sched.clip_grad_norm"}, False),
    "optimizer-inner-step": ({"sched.adamw", "sched.optimizer_step"}, False),
}


def rank_timers(path, iterations):
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    out = {}
    for name, ops in SPAN.items():
        sel = [e for e in events if e["args"]["function"] == ENTRY and e["args"]["op"] in ops]
        # One span per iteration: the entry's instructions of an iteration, split where a
        # zero_grads (the first op of every iteration) starts.
        starts = sorted(e["ts"] for e in events
                        if e["args"]["function"] == ENTRY and e["args"]["op"] == "sched.zero_grads"
                        and e["args"]["index"] == 0)
        total = 0.0
        for k, t0 in enumerate(starts):
            t1 = starts[k + 1] if k + 1 < len(starts) else float("inf")
            it = [e for e in sel if t0 <= e["ts"] < t1]
            if it:
                total += max(e["ts"] + e["dur"] for e in it) - min(e["ts"] for e in it)
        if sel:
            out[name] = total / 1e3 / iterations
    for name, (ops, any_function) in SUM.items():
        sel = [e for e in events if e["args"]["op"] in ops
               and (any_function or e["args"]["function"] == ENTRY)]
        if sel:
            out[name] = sum(e["dur"] for e in sel if not e["args"]["async"]) / 1e3 / iterations
    return out


def main():
    log, trace_dir, world, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ranks = [rank_timers(f"{trace_dir}/rank{r}.trace.json", iterations) for r in range(world)]
    bad = 0
    for r, t in enumerate(ranks):
        fb, fc, bc = t["forward-backward"], t["forward-compute"], t["backward-compute"]
        if fb + 1e-9 < fc + bc:
            print(f"rank {r}: forward-backward {fb} < forward-compute {fc} + backward-compute {bc}")
            bad += 1
        else:
            print(f"ok rank {r}: forward-backward {fb:.3f} >= forward-compute + backward-compute "
                  f"{fc + bc:.3f}")
    text = open(log).read()
    text = re.sub(r"^\[rank \d+\] ", "", text, flags=re.M)
    checked = 0
    for m in re.finditer(r"^    (\S+) \.*: \(([0-9.]+), ([0-9.]+)\)$", text, re.M):
        name, lo, hi = m.group(1), float(m.group(2)), float(m.group(3))
        vals = [t[name] for t in ranks if t.get(name, 0) > 0]
        want = (min(vals), max(vals))
        ok = abs(lo - want[0]) <= 0.0051 + 1e-9 and abs(hi - want[1]) <= 0.0051 + 1e-9
        print(f"{'ok' if ok else 'MISMATCH'} {name}: printed ({lo}, {hi}), ranks "
              f"{[round(v, 3) for v in vals]}")
        bad += not ok
        checked += 1
    for m in re.finditer(r"^    (\S+) \.*: ([0-9.]+)$", text, re.M):
        name, hi = m.group(1), float(m.group(2))
        want = max(t.get(name, 0) for t in ranks)
        ok = abs(hi - want) <= 0.0051
        print(f"{'ok' if ok else 'MISMATCH'} {name}: printed max {hi}, ranks' max {want:.3f}")
        bad += not ok
        checked += 1
    for m in re.finditer(r"^  (\S+):\n((?:     rank +\d+: [0-9.]+\n?)+)", text, re.M):
        name = m.group(1)
        for rm in re.finditer(r"rank +(\d+): ([0-9.]+)", m.group(2)):
            r, v = int(rm.group(1)), float(rm.group(2))
            ok = abs(v - ranks[r][name]) <= 0.0051
            print(f"{'ok' if ok else 'MISMATCH'} {name} rank {r}: printed {v}, trace "
                  f"{ranks[r][name]:.3f}")
            bad += not ok
            checked += 1
    if checked == 0:
        print("no timer lines found in the log")
        bad += 1
    print(f"checked {checked} timer values over {world} ranks")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
