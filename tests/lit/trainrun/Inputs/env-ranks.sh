#!/usr/bin/env bash
# Usage: env-ranks.sh WORLD TOKEN_RANK0 TOKEN_OTHERS -- TRAINRUN_ARGS...
# Runs WORLD trainrun processes in env-var mode, as an outer launcher (torchrun, srun) would:
# RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT=<a free port> set by hand,
# TRAINC_JOB_TOKEN=TOKEN_RANK0 for rank 0 and TOKEN_OTHERS for the others. Prints each rank's
# output prefixed "rank R: " and then "rank R exit S" for every rank.
set -u
world=$1; tok0=$2; tok=$3; shift 4
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
pids=()
for r in $(seq 0 $((world - 1))); do
  t=$tok; [ "$r" = 0 ] && t=$tok0
  RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    TRAINC_JOB_TOKEN=$t trainrun "$@" > "$dir/$r" 2>&1 &
  pids+=($!)
done
codes=()
for r in $(seq 0 $((world - 1))); do
  s=0; wait "${pids[$r]}" || s=$?; codes+=($s)
done
for r in $(seq 0 $((world - 1))); do sed "s/^/rank $r: /" "$dir/$r"; done
for r in $(seq 0 $((world - 1))); do echo "rank $r exit ${codes[$r]}"; done
rm -rf "$dir"
