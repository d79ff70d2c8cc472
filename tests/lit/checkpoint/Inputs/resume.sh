#!/usr/bin/env bash
# Usage: resume.sh NPROC PLAN WORK [RUNTIME FLAGS...]
# Trains PLAN 20 iterations straight; then, in WORK/ck, 10 iterations with --save and
# --exit-interval 10; then a new trainrun with --load for iterations 11-20. Prints the save, exit
# and load log lines, then compares byte for byte with the straight run: the resumed iterations'
# lines of losses.txt (iteration, lm loss, grad norm, lr as %.17g) and every rank's final
# weights. Exits non-zero at the first difference.
set -eu
nproc=$1 plan=$2 work=$3
shift 3
common=(--mock-data --train-iters 20 --eval-iters 0 --log-interval 5 "$@")
rm -rf "$work"
mkdir -p "$work"
trainrun --nproc "$nproc" "$plan" -- "${common[@]}" --dump-dir "$work/straight" > "$work/straight.log"
trainrun --nproc "$nproc" "$plan" -- "${common[@]}" --save "$work/ck" --exit-interval 10 > "$work/first.log"
grep -E "(saving|saved|loading|loaded) checkpoint|exiting" "$work/first.log"
trainrun --nproc "$nproc" "$plan" -- "${common[@]}" --load "$work/ck" --dump-dir "$work/resumed" > "$work/resumed.log"
grep -E "(saving|saved|loading|loaded) checkpoint|iteration +20/" "$work/resumed.log"
tail -n 10 "$work/straight/losses.txt" > "$work/straight-tail.txt"
cmp "$work/straight-tail.txt" "$work/resumed/losses.txt"
n=0
for f in "$work"/straight/final_weights*.safetensors; do
  cmp "$f" "$work/resumed/$(basename "$f")"
  n=$((n + 1))
done
echo "bitwise equal: iterations 11-20 (loss, grad norm, lr) and the final weights of $n rank(s)"
