#!/usr/bin/env bash
# Tensor-parallel iteration time: the same model and global batch at tp = 1 and tp = 2 (two rank
# processes over Gloo on loopback), measured in one run, with the communication share read from
# the executor's timers (trainrun --trace). On a shared 2-core machine this is a report, not a
# target: tp = 2 runs each rank on half the cores. The TP collectives (2 all-reduces per layer
# forward and 2 backward, the loss's 3 + 1) are synchronous, so all of their time is exposed.
#
# usage: bench/tp_throughput.sh [TRAINC [TRAINRUN [WORK_DIR]]]
# environment: PRESET (llama-10m), SEQ (128), MBS (2), GBS (8), ITERS (12), LOG_INTERVAL (4),
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINC=${1:-$ROOT/build/tools/trainc}
TRAINRUN=${2:-$ROOT/build/tools/trainrun}
WORK=${3:-/tmp/trainc-tp-bench}
PRESET=${PRESET:-llama-10m}
SEQ=${SEQ:-128}
MBS=${MBS:-2}
GBS=${GBS:-8}
ITERS=${ITERS:-12}
LOG_INTERVAL=${LOG_INTERVAL:-4}
CORES=$(nproc)

rm -rf "$WORK"
mkdir -p "$WORK"
echo "machine: $CORES CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $PRESET, seq $SEQ, micro batch $MBS, global batch $GBS"

for TP in 1 2; do
  THREADS=$(( CORES / TP > 0 ? CORES / TP : 1 ))
  "$TRAINC" compile --preset "$PRESET" --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
    --micro-batch-size "$MBS" --global-batch-size "$GBS" --tensor-model-parallel-size "$TP" \
    --lr 1e-4 --train-iters "$ITERS" -o "$WORK/plan$TP" \
    >"$WORK/compile$TP.log" 2>&1 || { cat "$WORK/compile$TP.log"; exit 1; }
  OMP_NUM_THREADS=$THREADS "$TRAINRUN" --nproc "$TP" "$WORK/plan$TP" -- --mock-data \
    --log-interval "$LOG_INTERVAL" --eval-iters 0 --trace "$WORK/trace$TP" \
    >"$WORK/trainrun$TP.log" 2>&1 || { cat "$WORK/trainrun$TP.log"; exit 1; }
  echo "tp $TP: $TP rank(s) x $THREADS thread(s)"
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
print(f"iteration time (ms): tp1 {t1:.1f} | tp2 {t2:.1f} | ratio tp2/tp1 {t2 / t1:.3f}")
print(f"tp2 rank 0 communication (TP all-reduces and the loss's): stream busy {100 * share:.1f}% of the iterations' time "
      f"({busy_ms:.1f} ms in all), exposed (compute waiting on it) {100 * exposed:.1f}%")
PY
