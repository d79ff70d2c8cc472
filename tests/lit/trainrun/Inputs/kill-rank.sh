#!/usr/bin/env bash
# Usage: kill-rank.sh OUT PLAN RANK -- TRAINRUN_ARGS...
# Starts `trainrun TRAINRUN_ARGS`, waits until rank RANK has logged (or for 3 s), sends that rank
# SIGKILL (or $KILL_SIGNAL, e.g. STOP), and checks that trainrun and every rank process are gone within 10 s. Writes
# trainrun's output to OUT and prints "trainrun exit N after S s" and "processes left: K".
set -u
out=$1; rank=$3; shift 4
trainrun "$@" > "$out" 2>&1 &
tr=$!
victim=""
for _ in $(seq 1 100); do
  sleep 0.1
  for c in $(ps --ppid "$tr" -o pid= 2>/dev/null); do
    if tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx "RANK=$rank"; then victim=$c; fi
  done
  # Wait until training runs (rank 0 logged an iteration) so that the kill lands mid-run.
  if [ -n "$victim" ] && grep -q "iteration" "$out"; then break; fi
done
children=$(ps --ppid "$tr" -o pid= 2>/dev/null | tr '\n' ' ')
[ -n "$victim" ] || { echo "rank $rank not found"; kill "$tr"; exit 1; }
start=$(date +%s%N)
kill -"${KILL_SIGNAL:-9}" "$victim"
status=0
wait "$tr" || status=$?
end=$(date +%s%N)
left=0
for c in $children; do [ -e "/proc/$c" ] && left=$((left + 1)); done
ms=$(( (end - start) / 1000000 ))
echo "trainrun exit $status after $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s"
if [ "$ms" -lt 10000 ]; then echo "within 10 s"; else echo "too slow"; fi
echo "processes left: $left"
