#!/usr/bin/env bash
# Tensor-parallel iteration time: the same model and global batch at tp = 1 and tp = 2 (two rank
# processes over Gloo on loopback), measured in one run, with the communication share read from
# the executor's timers (trainrun --trace). On a shared 2-core machine this is a report, not a
# target: tp = 2 runs each rank on half the cores. tp = 2 runs twice: with the backward TP
# collectives overlapped by trainc-tp-comm-overlap (the default) and with
# --no-async-tensor-model-parallel-allreduce (all synchronous). The TP communication share and
# the overlapped fraction come from the trace's otherData.comm_overlap (rank 0).
#
# usage: bench/tp_throughput.sh [TRAINC [TRAINRUN [WORK_DIR]]]
# environment: PRESET (llama-10m), SEQ (128), MBS (2), GBS (8), ITERS (12), LOG_INTERVAL (4),
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/parallel_common.sh" /tmp/trainc-tp-bench "$@"

for RUN in 1 2 2sync; do
  TP=${RUN%sync}
  EXTRA=()
  NOTE=""
  if [ "$RUN" = 2sync ]; then
    EXTRA=(--no-async-tensor-model-parallel-allreduce)
    NOTE=" (synchronous TP collectives)"
  fi
  THREADS=$(( CORES / TP > 0 ? CORES / TP : 1 ))
  "$TRAINC" compile --preset "$PRESET" --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
    --micro-batch-size "$MBS" --global-batch-size "$GBS" --tensor-model-parallel-size "$TP" \
    --lr 1e-4 --train-iters "$ITERS" "${EXTRA[@]}" -o "$WORK/plan$RUN" \
    >"$WORK/compile$RUN.log" 2>&1 || { cat "$WORK/compile$RUN.log"; exit 1; }
  OMP_NUM_THREADS=$THREADS "$TRAINRUN" --nproc "$TP" "$WORK/plan$RUN" -- --mock-data \
    --log-interval "$LOG_INTERVAL" --eval-iters 0 --trace "$WORK/trace$RUN" \
    >"$WORK/trainrun$RUN.log" 2>&1 || { cat "$WORK/trainrun$RUN.log"; exit 1; }
  echo "tp $TP$NOTE: $TP rank(s) x $THREADS thread(s)"
done

python3 - "$WORK" "$LOG_INTERVAL" <<'PY'
import json, re, sys
work, interval = sys.argv[1], int(sys.argv[2])

def iteration_ms(dp):
    # Mean over the logged intervals after the first (warm-up).
    v = [float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)",
                                      open(f"{work}/trainrun{dp}.log").read())]
    v = v[1:] or v
    return sum(v) / len(v)

def comm_share(run):
    # Rank 0's trace: the tp group's communication-stream time (otherData.comm_overlap) over the
    # wall time of the train_step runs, and the part of it during which compute kernels ran.
    trace = json.load(open(f"{work}/trace{run}/rank0.trace.json"))
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e["tid"] == 0 and e["args"]["function"] == "train_step"]
    tp = trace.get("otherData", {}).get("comm_overlap", {}).get("tp")
    if not steps or not tp:
        return None
    wall = sum(e["dur"] for e in steps)
    return {"share": tp["busy_us"] / wall, "overlapped": tp["overlapped_fraction"],
            "async": tp["async"], "collectives": tp["collectives"],
            "async_overlapping": tp["async_overlapping"],
            "async_overlapped": tp["async_overlapped_us"] / tp["async_busy_us"]
            if tp["async_busy_us"] > 0 else 0.0, "busy_ms": tp["busy_us"] / 1e3}

t1 = iteration_ms("1")
t2 = iteration_ms("2")
t2s = iteration_ms("2sync")
print(f"iteration time (ms): tp1 {t1:.1f} | tp2 {t2:.1f} (overlapped) | tp2 {t2s:.1f} (synchronous) "
      f"| ratio tp2/tp1 {t2 / t1:.3f}")
for run, what in (("2", "overlapped"), ("2sync", "synchronous")):
    c = comm_share(run)
    if c is None:
        print(f"tp2 {what}: no tp collectives in the trace")
        continue
    print(f"tp2 {what}, rank 0: TP communication {100 * c['share']:.1f}% of the train_step time "
          f"({c['busy_ms']:.1f} ms, {c['collectives']} collectives, {c['async']} async); "
          f"{100 * c['overlapped']:.1f}% of it overlapped compute kernels "
          f"(async ones: {c['async_overlapping']} overlapped some kernel, "
          f"{100 * c['async_overlapped']:.1f}% of their time)")
PY
