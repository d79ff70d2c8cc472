#!/usr/bin/env bash
# Checkpoint save and load speed, sync vs --async-save, and how long an async save blocks the
# training loop. Not a timed test: it prints numbers (docs/checkpoint.md lists measured ones).
#
# usage: bench/checkpoint_io.sh [TRAINC [TRAINRUN [WORK_DIR]]]
#   defaults: build/tools/trainc, build/tools/trainrun, /tmp/trainc-ckpt-bench
# environment:
#   MODELS   presets to measure (default "llama-tiny-text gpt2-small"; gpt2-small is compiled
#            with --attention-dropout 0, sequence 128, micro/global batch 1: 124M parameters,
#            1.49 GB of fp32 weights + Adam moments per checkpoint)
#   ITERS    iterations per run (default 4); saves at iterations 2 and 4 (--save-interval 2)
#
# For every model: a sync run and an --async-save run (each saves twice into its own directory;
# the first save of a run pays the staging memory's page faults, the second reuses it), then a
# run that only loads the last checkpoint. Per save it prints bytes, time, MB/s and, for async,
# the training loop's blocking time (staging + waiting for the writer + the cross-rank finalize)
# next to the background write time. The checkpoint directory is WORK_DIR (fsync'ed writes:
# the disk under it matters); loads read files the writes just left in the page cache.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINC=${1:-$ROOT/build/tools/trainc}
TRAINRUN=${2:-$ROOT/build/tools/trainrun}
WORK=${3:-/tmp/trainc-ckpt-bench}
MODELS=${MODELS:-llama-tiny-text gpt2-small}
ITERS=${ITERS:-4}

rm -rf "$WORK"
mkdir -p "$WORK"
common=(--mock-data --train-iters "$ITERS" --eval-iters 0 --log-interval 1)

for m in $MODELS; do
  case $m in
    gpt2-small) cflags=(--attention-dropout 0 --seq-length 128 --micro-batch-size 1 --global-batch-size 1) ;;
    *) cflags=(--micro-batch-size 2 --global-batch-size 4) ;;
  esac
  "$TRAINC" compile --preset "$m" "${cflags[@]}" --lr 1e-4 --train-iters "$ITERS" -o "$WORK/$m/plan" > /dev/null
  for mode in sync async; do
    extra=()
    [ "$mode" = async ] && extra=(--async-save)
    "$TRAINRUN" "$WORK/$m/plan" -- "${common[@]}" --save "$WORK/$m/ck-$mode" --save-interval 2 \
      "${extra[@]}" > "$WORK/$m/$mode.log"
  done
  "$TRAINRUN" "$WORK/$m/plan" -- "${common[@]}" --load "$WORK/$m/ck-sync" > "$WORK/$m/load.log"
  echo "== $m"
  # Iteration times (ms) of the sync and async runs, to see the background write's cost.
  for mode in sync async; do
    printf '  %-5s iteration ms:' "$mode"
    sed -n 's/.*iteration *\([0-9]*\)\/.*elapsed time per iteration (ms): \([0-9.]*\).*/ \1:\2/p' \
      "$WORK/$m/$mode.log" | tr -d '\n'
    echo
  done
  sed -n 's/.*successfully saved checkpoint from iteration *\([0-9]*\) to [^[]*\[ [^:]*: \([0-9]*\) bytes in \([0-9.]*\) s, \([0-9.]*\) MB\/s \]/  sync  save @\1: \2 bytes in \3 s, \4 MB\/s (the loop is blocked for all of it)/p' "$WORK/$m/sync.log"
  sed -n 's/.*successfully saved checkpoint from iteration *\([0-9]*\) to [^[]*\[ [^:]*: \([0-9]*\) bytes, async: blocking \([0-9.]*\) s (\([^)]*\)), background write \([0-9.]*\) s, \([0-9.]*\) MB\/s \]/  async save @\1: \2 bytes, loop blocked \3 s (\4), background write \5 s, \6 MB\/s/p' "$WORK/$m/async.log"
  sed -n 's/.*successfully loaded checkpoint from [^[]*\[ \([0-9]*\) bytes read by rank 0 in \([0-9.]*\) s, \([0-9.]*\) MB\/s.*/  load:        \1 bytes in \2 s, \3 MB\/s/p' "$WORK/$m/load.log"
done
