#!/usr/bin/env bash
# bf16 against fp32 training throughput on this CPU (issue 12): the same model and batch compiled
# without and with --bf16, each trained with trainrun on mock data; prints both tokens/s and the
# ratio (the first log interval is warm-up and not counted).
#
# usage: bench/bf16_throughput.sh [TRAINC [TRAINRUN [WORK_DIR]]]
# environment: PRESET (llama-10m), SEQ (256), MBS (4), GBS (16), ITERS (20), LOG_INTERVAL (5)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINC=${1:-$ROOT/build/tools/trainc}
TRAINRUN=${2:-$ROOT/build/tools/trainrun}
WORK=${3:-/tmp/trainc-bf16-throughput}
PRESET=${PRESET:-llama-10m}
SEQ=${SEQ:-256}
MBS=${MBS:-4}
GBS=${GBS:-16}
ITERS=${ITERS:-20}
LOG_INTERVAL=${LOG_INTERVAL:-5}
rm -rf "$WORK"
mkdir -p "$WORK"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
tps() { # $1: name, then extra compile flags
  local name=$1
  shift
  "$TRAINC" compile --preset "$PRESET" --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
    --micro-batch-size "$MBS" --global-batch-size "$GBS" --lr 1e-4 --train-iters "$ITERS" "$@" \
    -o "$WORK/$name" >"$WORK/$name.compile.log" 2>&1 || { cat "$WORK/$name.compile.log" >&2; exit 1; }
  "$TRAINRUN" "$WORK/$name" -- --mock-data --log-interval "$LOG_INTERVAL" >"$WORK/$name.log" 2>&1 ||
    { cat "$WORK/$name.log" >&2; exit 1; }
  grep -o 'tokens per second: [0-9.]*' "$WORK/$name.log" | awk '{print $4}' |
    awk 'NR > 1 && $1 > 0 { n++; s += 1 / $1 } END { if (n) printf "%.1f", n / s }'
}
FP32=$(tps fp32)
BF16=$(tps bf16 --bf16)
echo "model: $PRESET, seq $SEQ, micro batch $MBS, global batch $GBS, $ITERS iterations"
printf '  fp32  %10.1f tokens/s\n' "$FP32"
printf '  bf16  %10.1f tokens/s\n' "$BF16"
awk -v a="$BF16" -v b="$FP32" 'BEGIN { printf "  ratio bf16/fp32: %.2f\n", a / b }'
