#!/usr/bin/env bash
# Usage: async-resume.sh NPROC PLAN WORK [RUNTIME FLAGS...]
# Like resume.sh, with --async-save. Trains PLAN 20 iterations straight; then, in WORK/ck, 20
# iterations with --save --save-interval 5 --async-save whose background writes stall 300 ms
# half-way (TRAINC_TEST_ASYNC_WRITE_SLEEP_MS), so that training goes on while iteration 10's
# state is being written; then a new trainrun with --load --ckpt-step 10 for iterations 11-20.
# Prints the save and load log lines, then compares byte for byte with the straight run: the
# resumed iterations' lines of losses.txt and every rank's final weights.
set -eu
nproc=$1 plan=$2 work=$3
shift 3
common=(--mock-data --train-iters 20 --eval-iters 0 --log-interval 1 "$@")
rm -rf "$work"
mkdir -p "$work"
trainrun --nproc "$nproc" "$plan" -- "${common[@]}" --dump-dir "$work/straight" > "$work/straight.log"
TRAINC_TEST_ASYNC_WRITE_SLEEP_MS=300 TRAINC_TEST_ITERATION_SLEEP_MS=50 \
  trainrun --nproc "$nproc" "$plan" -- "${common[@]}" --save "$work/ck" --save-interval 5 --async-save > "$work/first.log"
grep -E "(saving|saved|loading|loaded) checkpoint|async|exiting|iteration +1[01]/" "$work/first.log"
# Iteration 11 ran while iteration 10's save was still pending: its line comes between the
# save's schedule and its completion.
awk '/scheduled an async checkpoint save at iteration +10 /{s=1} s && /iteration +11\//{i=1} /successfully saved checkpoint from iteration +10 /{if (s && i) print "iteration 11 trained while iteration 10 was written"; exit}' "$work/first.log"
ls "$work/ck"
trainrun --nproc "$nproc" "$plan" -- "${common[@]}" --load "$work/ck" --ckpt-step 10 --dump-dir "$work/resumed" > "$work/resumed.log"
grep -E "(loading|loaded) checkpoint|iteration +20/" "$work/resumed.log"
tail -n 10 "$work/straight/losses.txt" > "$work/straight-tail.txt"
cmp "$work/straight-tail.txt" "$work/resumed/losses.txt"
n=0
for f in "$work"/straight/final_weights*.safetensors; do
  cmp "$f" "$work/resumed/$(basename "$f")"
  n=$((n + 1))
done
echo "bitwise equal: iterations 11-20 (loss, grad norm, lr) and the final weights of $n rank(s)"
