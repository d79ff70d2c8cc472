#!/usr/bin/env bash
# Usage: two-nodes.sh PLAN
# Runs `trainrun --nnodes 2 --nproc 1` twice on this machine, as two nodes of one job.
set -u
plan=$1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
export TRAINC_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
for n in 0 1; do
  trainrun --nnodes 2 --node-rank $n --nproc 1 --master-addr 127.0.0.1 --master-port "$port" \
    "$plan" -- --mock-data --train-iters 2 --eval-iters 0 > "$dir/$n" 2>&1 &
  pids[$n]=$!
done
for n in 0 1; do s=0; wait "${pids[$n]}" || s=$?; echo "node $n exit $s: $(tail -1 "$dir/$n")"; done
rm -rf "$dir"
