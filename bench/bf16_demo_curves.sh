#!/usr/bin/env bash
# bf16 against fp32 loss curves of the demo model (issue 12 acceptance: within 2% relative at
# iterations 50..300): scripts/demo.sh's model (llama-tiny-text), batch and data
# (/usr/share/common-licenses), compiled without and with --bf16 from the same seed, plus an fp32
# run with another --seed to show the run-to-run spread of the configuration itself. Prints the
# training loss (lm loss, nats per byte) at iterations 10, 50, 100, ..., 300 and the relative
# differences to the first fp32 run.
#
# usage: bench/bf16_demo_curves.sh [TRAINC [TRAINRUN [WORK_DIR]]]
# environment: LR (1e-3), MIN_LR (1e-4), WARMUP (50), CLIP (1.0), ITERS (300), SEED (1234),
#   SEED2 (4321), RUNS ("fp32 bf16 fp32-seed2": the runs to do, in parallel; a run whose log in
#   WORK_DIR already reached ITERS is kept), TABLE_ONLY (1: only print the table from WORK_DIR)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINC=${1:-$ROOT/build/tools/trainc}
TRAINRUN=${2:-$ROOT/build/tools/trainrun}
WORK=${3:-/tmp/trainc-bf16-demo-curves}
LR=${LR:-1e-3}
MIN_LR=${MIN_LR:-1e-4}
WARMUP=${WARMUP:-50}
CLIP=${CLIP:-1.0}
ITERS=${ITERS:-300}
SEED=${SEED:-1234}
SEED2=${SEED2:-4321}
RUNS=${RUNS:-fp32 bf16 fp32-seed2}
mkdir -p "$WORK"
run() { # $1: name, $2: seed, then extra compile flags
  local name=$1 seed=$2
  shift 2
  if grep -q "iteration *$ITERS/" "$WORK/$name.log" 2>/dev/null; then return; fi
  "$TRAINC" compile --preset llama-tiny-text --micro-batch-size 4 --global-batch-size 16 \
    --lr "$LR" --min-lr "$MIN_LR" --lr-decay-style cosine --lr-warmup-iters "$WARMUP" \
    --weight-decay 0.1 --adam-beta2 0.95 --clip-grad "$CLIP" --train-iters "$ITERS" \
    --data-path /usr/share/common-licenses --split 95,5,0 "$@" \
    -o "$WORK/$name" >"$WORK/$name.compile.log" 2>&1 || { cat "$WORK/$name.compile.log" >&2; exit 1; }
  "$TRAINRUN" "$WORK/$name" -- --seed "$seed" --log-interval 10 --eval-interval "$ITERS" \
    --eval-iters 5 >"$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log" >&2; exit 1; }
}
if [ "${TABLE_ONLY:-0}" != 1 ]; then
  pids=()
  for r in $RUNS; do
    case $r in
      fp32) run fp32 "$SEED" & ;;
      bf16) run bf16 "$SEED" --bf16 & ;;
      fp32-seed2) run fp32-seed2 "$SEED2" & ;;
      *) echo "bf16_demo_curves.sh: unknown run '$r' in RUNS (expected fp32, bf16, fp32-seed2)" >&2; exit 1 ;;
    esac
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
fi
for r in fp32 bf16 fp32-seed2; do
  sed -n 's/.*iteration *\([0-9]*\)\/.*lm loss: \([0-9.E+-]*\).*/\1 \2/p' "$WORK/$r.log" >"$WORK/$r.loss" 2>/dev/null || : >"$WORK/$r.loss"
done
echo "demo model (llama-tiny-text), lr $LR -> $MIN_LR cosine, warmup $WARMUP, clip $CLIP, $ITERS iterations"
echo "iteration  fp32(seed $SEED)  bf16(seed $SEED)  rel    fp32(seed $SEED2)  rel"
for it in 10 50 100 150 200 250 300; do
  a=$(awk -v i="$it" '$1 == i { print $2 }' "$WORK/fp32.loss")
  b=$(awk -v i="$it" '$1 == i { print $2 }' "$WORK/bf16.loss")
  c=$(awk -v i="$it" '$1 == i { print $2 }' "$WORK/fp32-seed2.loss")
  awk -v i="$it" -v a="$a" -v b="$b" -v c="$c" 'function rel(x) { return (a > 0 && x > 0) ? sprintf("%+.2f%%", 100 * (x - a) / a) : "-" }
    BEGIN { printf "%9d  %15s  %15s  %7s  %15s  %7s\n", i, a, b, rel(b), c, rel(c) }'
done
# The 50..300 band at every logged iteration.
paste "$WORK/fp32.loss" "$WORK/bf16.loss" | awk 'NF == 4 && $1 >= 50 { r = ($4 - $2) / $2; if (r < 0) r = -r; if (r > m) m = r; last = $1 }
  END { printf "max |bf16 - fp32| / fp32 at iterations 50..%d (every 10): %.2f%%\n", last, 100 * m }'
paste "$WORK/fp32.loss" "$WORK/fp32-seed2.loss" | awk 'NF == 4 && $1 >= 50 { r = ($4 - $2) / $2; if (r < 0) r = -r; if (r > m) m = r; last = $1 }
  END { printf "max |fp32 seed2 - fp32| / fp32 at iterations 50..%d (every 10): %.2f%%\n", last, 100 * m }'
