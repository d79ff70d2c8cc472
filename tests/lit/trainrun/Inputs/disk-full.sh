#!/usr/bin/env bash
# Usage: disk-full.sh DIR PLAN: trains PLAN with --dump-dir on a 192 KiB tmpfs mounted at DIR
# (the initial weights fit, the per-iteration batches and losses fill it), prints trainrun's
# exit status and the last line of its stderr, then unmounts. Where a tmpfs cannot be mounted
# (not root) it prints only "skipped: cannot mount a tmpfs", which the test accepts as a skip.
set -u
dir=$1; plan=$2
mkdir -p "$dir"
if ! mount -t tmpfs -o size=192k tmpfs "$dir" 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs"; exit 0
fi
trainrun "$plan" -- --mock-data --train-iters 1000000 --log-interval 1000000 --eval-iters 0 \
  --dump-dir "$dir/dump" > "$dir.out" 2> "$dir.err"
echo "trainrun exit $?"
tail -1 "$dir.err"
umount "$dir"
