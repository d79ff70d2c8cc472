#!/usr/bin/env bash
# Usage: async-kill.sh PLAN WORK
# A kill -9 while an --async-save's background write is in progress leaves the previous
# checkpoint loadable. Trains PLAN (one rank) 20 iterations straight; saves iteration 5
# (--exit-interval 5); resumes with --save-interval 5 --async-save whose background write stalls
# half-way through the rank file (TRAINC_TEST_ASYNC_WRITE_SLEEP_MS=60000), waits until iteration
# 12 has trained (the loop goes on while iteration 10 is written) and the half-written
# rank0.safetensors.tmp is there, and kills the trainer with SIGKILL. Then the tracker still
# names iteration 5, and a run resumed from it matches the straight run byte for byte.
set -u
plan=$1 work=$2
common=(--mock-data --train-iters 20 --eval-iters 0 --log-interval 1)
rm -rf "$work"
mkdir -p "$work"
trainrun "$plan" -- "${common[@]}" --dump-dir "$work/straight" > "$work/straight.log" || exit 1
trainrun "$plan" -- "${common[@]}" --save "$work/ck" --exit-interval 5 > "$work/first.log" || exit 1
TRAINC_TEST_ASYNC_WRITE_SLEEP_MS=60000 TRAINC_TEST_ITERATION_SLEEP_MS=20 trainrun "$plan" -- \
  "${common[@]}" --load "$work/ck" --save "$work/ck" --save-interval 5 --async-save \
  > "$work/second.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  grep -q "iteration       12/" "$work/second.log" 2> /dev/null && break
  sleep 0.05
done
ls "$work/ck/iter_0000010.partial"
kill -KILL "$pid"
wait "$pid" 2> /dev/null
echo "trainrun exit status $?"
grep -E "(saving|saved) checkpoint|async" "$work/second.log"
echo "tracker: $(cat "$work/ck/latest_checkpointed_iteration.txt")"
ls "$work/ck"
trainrun "$plan" -- "${common[@]}" --load "$work/ck" --dump-dir "$work/resumed" > "$work/resumed.log" || exit 1
grep -E "loaded checkpoint" "$work/resumed.log"
tail -n 15 "$work/straight/losses.txt" | cmp - "$work/resumed/losses.txt" || exit 1
cmp "$work/straight/final_weights.safetensors" "$work/resumed/final_weights.safetensors" || exit 1
echo "resumed from the previous checkpoint: bitwise equal to the uninterrupted run"
