#!/usr/bin/env bash
# What Megatron's timers cost (trainrun --timing-log-level 2): the same plan run with the timers
# off and on, alternating, and the median elapsed time per iteration of each, with the ratio
# (reference: the same run without timers). The timers read the steady clock around every
# instruction and never synchronise, so the ratio should stay near 1; on a shared machine read
# it together with the load average printed first.
#
# usage: bench/timers_overhead.sh [TRAINC [TRAINRUN [WORK_DIR]]]
# environment: PRESET (llama-10m), SEQ (128), MBS (2), GBS (8), ITERS (20), REPEATS (3)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINC=${1:-$ROOT/build/tools/trainc}
TRAINRUN=${2:-$ROOT/build/tools/trainrun}
WORK=${3:-/tmp/trainc-timers-bench}
PRESET=${PRESET:-llama-10m}
SEQ=${SEQ:-128}
MBS=${MBS:-2}
GBS=${GBS:-8}
ITERS=${ITERS:-20}
REPEATS=${REPEATS:-3}

rm -rf "$WORK"
mkdir -p "$WORK"
echo "machine: $(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $PRESET, seq $SEQ, micro batch $MBS, global batch $GBS, $ITERS iterations x $REPEATS runs each"
"$TRAINC" compile --preset "$PRESET" --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
  --micro-batch-size "$MBS" --global-batch-size "$GBS" --lr 1e-4 --train-iters "$ITERS" \
  -o "$WORK/plan" >"$WORK/compile.log" 2>&1 || { cat "$WORK/compile.log"; exit 1; }

# Per-iteration times (log interval 1), the first two iterations (warm-up) dropped.
times() {
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | awk 'NR > 2 { print $NF }'
}
: >"$WORK/off.txt"
: >"$WORK/on.txt"
for r in $(seq "$REPEATS"); do
  "$TRAINRUN" "$WORK/plan" -- --mock-data --log-interval 1 --eval-iters 0 >"$WORK/off$r.log"
  times "$WORK/off$r.log" >>"$WORK/off.txt"
  "$TRAINRUN" "$WORK/plan" -- --mock-data --log-interval 1 --eval-iters 0 \
    --timing-log-level 2 >"$WORK/on$r.log"
  times "$WORK/on$r.log" >>"$WORK/on.txt"
done
median() { sort -n "$1" | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
OFF=$(median "$WORK/off.txt")
ON=$(median "$WORK/on.txt")
echo "median ms per iteration: timers off $OFF, --timing-log-level 2 $ON"
awk -v on="$ON" -v off="$OFF" 'BEGIN { printf "ratio (timers on / off, reference = off): %.3f\n", on / off }'
echo "timers of the last interval (last run):"
tac "$WORK/on$REPEATS.log" | grep -v '^trainc:' | sed -n '1,/time across ranks/p' | tac
