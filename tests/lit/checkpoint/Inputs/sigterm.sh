#!/usr/bin/env bash
# Usage: sigterm.sh NPROC PLAN WORK [RUNTIME FLAGS...]
# Trains PLAN 20 iterations straight. Then starts a run with --exit-signal-handler --save
# WORK/ck whose iterations take 100 ms longer (TRAINC_TEST_ITERATION_SLEEP_MS), sends SIGTERM to
# trainrun once iteration 3 is logged, and prints trainrun's exit status, its exit and checkpoint
# lines and its stderr. Then resumes with --load to iteration 20 and compares byte for byte with
# the straight run: the resumed iterations' lines of losses.txt and every rank's final weights.
# SAVE_FLAGS (e.g. --async-save) are added to the signalled run only.
set -u
nproc=$1 plan=$2 work=$3
shift 3
common=(--mock-data --train-iters 20 --eval-iters 0 --log-interval 1 "$@")
rm -rf "$work"
mkdir -p "$work"
trainrun --nproc "$nproc" "$plan" -- "${common[@]}" --dump-dir "$work/straight" > "$work/straight.log" || exit 1
TRAINC_TEST_ITERATION_SLEEP_MS=100 trainrun --nproc "$nproc" "$plan" -- "${common[@]}" \
  --exit-signal-handler --save "$work/ck" ${SAVE_FLAGS:-} > "$work/first.log" 2> "$work/first.err" &
pid=$!
for _ in $(seq 1 600); do
  grep -q "iteration        3/" "$work/first.log" 2> /dev/null && break
  sleep 0.05
done
kill -TERM "$pid"
wait "$pid"
echo "trainrun exit status $?"
grep -E "(saving|saved|loading|loaded) checkpoint|exiting" "$work/first.log"
cat "$work/first.err"
it=$(cat "$work/ck/latest_checkpointed_iteration.txt")
if [ "$it" -lt 3 ] || [ "$it" -ge 20 ]; then
  echo "the signalled run stopped at iteration $it, expected 3..19"
  exit 1
fi
trainrun --nproc "$nproc" "$plan" -- "${common[@]}" --load "$work/ck" --dump-dir "$work/resumed" > "$work/resumed.log" || exit 1
tail -n $((20 - it)) "$work/straight/losses.txt" | cmp - "$work/resumed/losses.txt" || exit 1
for f in "$work"/straight/final_weights*.safetensors; do
  cmp "$f" "$work/resumed/$(basename "$f")" || exit 1
done
echo "resumed from the signal's checkpoint: bitwise equal to the uninterrupted run"
