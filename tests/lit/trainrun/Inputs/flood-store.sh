#!/usr/bin/env bash
# Usage: flood-store.sh OUT -- TRAINRUN_ARGS...
# Starts `trainrun TRAINRUN_ARGS` (iterations slowed to 20 ms), finds the rendezvous store's port
# in a rank's environment, floods it with 3,000 connections from loopback (silent, HTTP garbage,
# wrong token; at most 500 open at once) while the job trains, then prints trainrun's exit status
# and whether the launcher's RSS grew by less than 4 MiB during the flood.
set -u
out=$1; shift 2
TRAINC_TEST_ITERATION_SLEEP_MS=20 trainrun "$@" > "$out" 2>&1 &
tr=$!
port=""
for _ in $(seq 1 100); do
  sleep 0.1
  for c in $(ps --ppid "$tr" -o pid= 2>/dev/null); do
    p=$(tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | sed -n 's/^MASTER_PORT=//p')
    [ -n "$p" ] && port=$p
  done
  if [ -n "$port" ] && grep -q "iteration" "$out"; then break; fi
done
[ -n "$port" ] || { echo "no store port found"; kill "$tr"; exit 1; }
rss0=$(awk '/VmRSS/{print $2}' "/proc/$tr/status")
python3 - "$port" <<'PY'
import socket, sys
port = int(sys.argv[1])
open_socks, made = [], 0
for i in range(3000):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        continue
    made += 1
    if i % 3 == 1:
        s.send(b"GET / HTTP/1.0\r\n\r\n")
    elif i % 3 == 2:
        s.send(b"TRNCST01" + (32).to_bytes(4, "little") + b"x" * 32)
    open_socks.append(s)
    if len(open_socks) > 500:
        open_socks.pop(0).close()
print("flood: %d connections" % made)
PY
rss1=$(awk '/VmRSS/{print $2}' "/proc/$tr/status" 2>/dev/null || echo "$rss0")
status=0
wait "$tr" || status=$?
echo "trainrun exit $status"
growth=$((rss1 - rss0))
if [ "$growth" -lt 4096 ]; then echo "launcher RSS growth under 4 MiB"; else echo "launcher RSS grew by $growth KiB"; fi
