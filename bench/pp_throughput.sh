#!/usr/bin/env bash
# Pipeline-parallel iteration time: the same model and global batch as pp = 1, pp = 2 (two rank
# processes over Gloo on loopback, Megatron's 1F1B), pp = 2 interleaved (3 model chunks per
# stage) and pp = 2 ZB-H1 (--pipeline-schedule zb-h1), and the measured bubble from the trace next to the cost model's (trainc inspect
# --schedule). On a shared 2-core machine this is a report, not a target: pp = 2 runs each stage
# on half the cores.
#
# usage: bench/pp_throughput.sh [TRAINC [TRAINRUN [WORK_DIR]]]
# environment: PRESET (llama-10m), SEQ (128), MBS (2), GBS (8), ITERS (12), LOG_INTERVAL (4)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/parallel_common.sh" /tmp/trainc-pp-bench "$@"

# NAME:PP:VPP[:SCHEDULE] (VPP 1: no interleaving; SCHEDULE: --pipeline-schedule, else Megatron's).
for CONFIG in 1:1:1 2:2:1 2v3:2:3 2zb:2:1:zb-h1; do
  IFS=: read -r NAME PP VPP SCHEDULE <<<"$CONFIG"
  SCHEDULE_FLAGS=()
  [[ -n "${SCHEDULE:-}" ]] && SCHEDULE_FLAGS=(--pipeline-schedule "$SCHEDULE")
  THREADS=$(( CORES / PP > 0 ? CORES / PP : 1 ))
  "$TRAINC" compile --preset "$PRESET" --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
    --micro-batch-size "$MBS" --global-batch-size "$GBS" --pipeline-model-parallel-size "$PP" \
    --virtual-pipeline-model-parallel-size "$VPP" "${SCHEDULE_FLAGS[@]}" \
    --lr 1e-4 --train-iters "$ITERS" -o "$WORK/plan$NAME" \
    >"$WORK/compile$NAME.log" 2>&1 || { cat "$WORK/compile$NAME.log"; exit 1; }
  OMP_NUM_THREADS=$THREADS "$TRAINRUN" --nproc "$PP" "$WORK/plan$NAME" -- --mock-data \
    --log-interval "$LOG_INTERVAL" --eval-iters 0 --trace "$WORK/trace$NAME" \
    >"$WORK/trainrun$NAME.log" 2>&1 || { cat "$WORK/trainrun$NAME.log"; exit 1; }
  echo "pp $PP vpp $VPP: $PP rank(s) x $THREADS thread(s), schedule $(grep -o '"schedule": "[^"]*"' "$WORK/plan$NAME/plan.json" | cut -d'"' -f4)"
done
for NAME in 2 2v3 2zb; do
  echo "cost model, plan $NAME: $("$TRAINC" inspect "$WORK/plan$NAME" --schedule | grep 'bubble' | tr '\n' ' ')" || true
done

python3 - "$WORK" <<'PY'
import json, re, sys
work = sys.argv[1]

def iteration_ms(pp):
    v = [float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)",
                                      open(f"{work}/trainrun{pp}.log").read())]
    v = v[1:] or v
    return sum(v) / len(v)

def measured_bubble(name, ranks=None):
    # Per rank: the share of train_step's wall time (its top-level instructions, from the first
    # start to the last end) not spent in forward/backward unit calls, averaged over ranks.
    shares = []
    for r in range(ranks or int(name)):
        ev = [e for e in json.load(open(f"{work}/trace{name}/rank{r}.trace.json"))["traceEvents"]
              if e.get("ph") == "X" and e["tid"] == 0 and e["args"].get("function") == "train_step"]
        if not ev:
            continue
        t0, t1 = min(e["ts"] for e in ev), max(e["ts"] + e["dur"] for e in ev)
        units = sum(e["dur"] for e in ev
                    if e["name"].endswith((".forward", ".backward", ".input", ".weight")))
        shares.append(1 - units / (t1 - t0))
    return sum(shares) / len(shares) if shares else float("nan")

t1, t2, t2v, t2z = iteration_ms(1), iteration_ms(2), iteration_ms("2v3"), iteration_ms("2zb")
print(f"iteration time (ms): pp1 {t1:.1f} | pp2 1f1b {t2:.1f} | pp2 interleaved (vpp 3) "
      f"{t2v:.1f} | pp2 zb-h1 {t2z:.1f} | ratios to pp1 {t2 / t1:.3f}, {t2v / t1:.3f}, "
      f"{t2z / t1:.3f}")
print(f"measured bubble (time outside F/B/W units in train_step, mean over ranks): "
      f"pp1 {measured_bubble(1):.4f} | pp2 1f1b {measured_bubble(2):.4f} | "
      f"pp2 interleaved {measured_bubble('2v3', 2):.4f} | pp2 zb-h1 {measured_bubble('2zb', 2):.4f}")
PY
