#!/usr/bin/env bash
# The main job on its built-in default: builds trainc if needed, compiles a small byte-level Llama
# (preset llama-tiny-text: 4 layers, hidden 256, ~2.9M parameters, seq 128) with a Megatron-LM
# command line, and trains it with trainrun on the English text every Debian machine has
# (/usr/share/common-licenses), printing Megatron-style log lines with training and validation
# loss (nats per byte; uniform bytes would be ln 256 = 5.55).
#
#   scripts/demo.sh                         # the default run
#   scripts/demo.sh --data-path my.txt      # your own text (files or directories)
#   scripts/demo.sh --train-iters 50        # any trainrun flag overrides the defaults
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRAINC_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" trainc trainrun >/dev/null
plan="$(mktemp -d /tmp/trainc-demo.XXXXXX)"
trap 'rm -rf "$plan"' EXIT
"$build/tools/trainc" compile --preset llama-tiny-text \
  --micro-batch-size 4 --global-batch-size 16 \
  --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 20 \
  --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 \
  --train-iters 300 --log-interval 20 --eval-interval 100 --eval-iters 5 --split 95,5,0 \
  --data-path /usr/share/common-licenses \
  -o "$plan/plan"
"$build/tools/trainrun" "$plan/plan" -- "$@"
