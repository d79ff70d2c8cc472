#!/usr/bin/env bash
# Usage: term-job.sh SIGNAL OUT -- TRAINRUN_ARGS...
# Starts `trainrun TRAINRUN_ARGS`, waits until it trains (rank 0 logged an iteration), sends SIGNAL
# to trainrun itself, and prints "trainrun exit N", whether that took less than 10 s, and how many
# rank processes are left.
set -u
sig=$1; out=$2; shift 3
trainrun "$@" > "$out" 2>&1 &
tr=$!
for _ in $(seq 1 100); do
  sleep 0.1
  grep -q "iteration" "$out" && break
done
children=$(ps --ppid "$tr" -o pid= 2>/dev/null | tr '\n' ' ')
start=$(date +%s%N)
kill -"$sig" "$tr"
status=0
wait "$tr" || status=$?
end=$(date +%s%N)
left=0
for c in $children; do [ -e "/proc/$c" ] && left=$((left + 1)); done
echo "trainrun exit $status"
if [ $(( (end - start) / 1000000 )) -lt 10000 ]; then echo "within 10 s"; else echo "too slow"; fi
echo "ranks started: $(echo $children | wc -w), processes left: $left"
