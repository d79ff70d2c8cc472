#!/usr/bin/env bash
# Opt-in end-to-end test: trains a tiny Llama with trainc for 10 iterations and replays the same
# run in PyTorch (tests/e2e/torch_reference.py): losses, gradient norms, the lr schedule and the
# final weights must agree within a relative 1e-5 (fp32).
#
# usage: torch_comparison.sh TRAINC TRAINRUN WORK_DIR
# Exits 77 (skipped) when /usr/bin/python3 cannot import torch (Debian's python3-torch).
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 TRAINC TRAINRUN WORK_DIR" >&2
  exit 2
fi
TRAINC=$1
TRAINRUN=$2
WORK=$3
PYTHON=${TORCH_PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
  echo "SKIP: '$PYTHON -c \"import torch\"' fails (install python3-torch)"
  exit 77
fi

ITERS=10
rm -rf "$WORK"
mkdir -p "$WORK/dump"

echo "== trainc compile"
"$TRAINC" compile --preset llama-tiny-text \
  --seq-length 32 --max-position-embeddings 32 \
  --micro-batch-size 2 --global-batch-size 4 \
  --lr 1e-3 --lr-warmup-iters 2 --clip-grad 1.0 --weight-decay 0.1 \
  --train-iters "$ITERS" -o "$WORK/plan"

echo "== trainrun ($ITERS iterations, mock data)"
"$TRAINRUN" "$WORK/plan" -- --mock-data --dump-dir "$WORK/dump" --log-interval 1 \
  >"$WORK/trainrun.log" 2>&1 || { cat "$WORK/trainrun.log"; exit 1; }
tail -n 3 "$WORK/trainrun.log"

echo "== PyTorch reference"
"$PYTHON" "$HERE/torch_reference.py" --plan "$WORK/plan" --dump "$WORK/dump" \
  --iters "$ITERS" --rtol 1e-5 --check-lr-schedule
