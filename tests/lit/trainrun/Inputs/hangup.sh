#!/usr/bin/env bash
# Usage: hangup.sh OUT -- TRAINRUN_ARGS...: runs trainrun as `nohup` would (SIGHUP ignored),
# sends SIGHUP to the launcher and its ranks once training runs, and prints its exit status.
set -u
out=$1; shift 2
bash -c 'trap "" HUP; exec trainrun "$@"' trainrun "$@" > "$out" 2>&1 &
tr=$!
for _ in $(seq 1 100); do
  sleep 0.1
  grep -q "iteration" "$out" && break
done
kill -HUP "$tr"
pkill -HUP -P "$tr"
status=0
wait "$tr" || status=$?
echo "trainrun exit $status after SIGHUP"
