#!/usr/bin/env bash
# Data-parallel iteration time: the same model and global batch as dp = 1 and dp = 2 (two rank
# processes over Gloo on loopback), measured in one run, with the communication share read from
# the executor's timers (trainrun --trace). On a shared 2-core machine this is a report, not a
# target: dp = 2 runs each rank on half the cores.
#
# usage: bench/dp_throughput.sh [TRAINC [TRAINRUN [WORK_DIR]]]
# environment: PRESET (llama-10m), SEQ (128), MBS (2), GBS (8), ITERS (12), LOG_INTERVAL (4),
#              BUCKET (Megatron's default when unset; e.g. 500000 for several buckets)
set -euo pipefail

BUCKET=${BUCKET:-500000}
MODEL_NOTE=", bucket size $BUCKET elements"
source "$(dirname "${BASH_SOURCE[0]}")/parallel_common.sh" /tmp/trainc-dp-bench "$@"

for DP in 1 2; do
  THREADS=$(( CORES / DP > 0 ? CORES / DP : 1 ))
  "$TRAINC" compile --preset "$PRESET" --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
    --micro-batch-size "$MBS" --global-batch-size "$GBS" --data-parallel-size "$DP" \
    --ddp-bucket-size "$BUCKET" --lr 1e-4 --train-iters "$ITERS" -o "$WORK/plan$DP" \
    >"$WORK/compile$DP.log" 2>&1 || { cat "$WORK/compile$DP.log"; exit 1; }
  OMP_NUM_THREADS=$THREADS "$TRAINRUN" --nproc "$DP" "$WORK/plan$DP" -- --mock-data \
    --log-interval "$LOG_INTERVAL" --eval-iters 0 --trace "$WORK/trace$DP" \
    >"$WORK/trainrun$DP.log" 2>&1 || { cat "$WORK/trainrun$DP.log"; exit 1; }
  echo "dp $DP: $DP rank(s) x $THREADS thread(s)"
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

def comm_share(dp):
    # Rank 0's trace: busy time of the communication stream and the compute stream's time spent
    # in waits (exposed communication) inside train_step, over the wall time of the iterations.
    ev = [e for e in json.load(open(f"{work}/trace{dp}/rank0.trace.json"))["traceEvents"]
          if e.get("ph") == "X"]
    steps = [e for e in ev if e["tid"] == 0 and e["args"]["function"] == "train_step"]
    if not steps:
        return 0.0, 0.0, 0.0
    t0, t1 = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    busy = sum(e["dur"] for e in ev if e["tid"] == 1 and t0 <= e["ts"] <= t1)
    exposed = sum(e["dur"] for e in steps if e["name"] == "wait" or e["cat"] == "communication")
    return busy / (t1 - t0), exposed / (t1 - t0), busy / 1e3

t1 = iteration_ms(1)
t2 = iteration_ms(2)
share, exposed, busy_ms = comm_share(2)
print(f"iteration time (ms): dp1 {t1:.1f} | dp2 {t2:.1f} | ratio dp2/dp1 {t2 / t1:.3f}")
print(f"dp2 rank 0 communication: stream busy {100 * share:.1f}% of the iterations' time "
      f"({busy_ms:.1f} ms in all), exposed (compute waiting on it) {100 * exposed:.1f}%")
PY
