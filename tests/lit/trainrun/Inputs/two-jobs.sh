#!/usr/bin/env bash
# Usage: two-jobs.sh PLAN -- RUNTIME_FLAGS...
# Runs two `trainrun --nproc 2 PLAN` jobs at the same time on this machine and prints each job's
# exit status and last line.
set -u
plan=$1; shift 2
dir=$(mktemp -d)
trainrun --nproc 2 "$plan" -- "$@" > "$dir/a" 2>&1 & a=$!
trainrun --nproc 2 "$plan" -- "$@" > "$dir/b" 2>&1 & b=$!
sa=0; wait $a || sa=$?
sb=0; wait $b || sb=$?
echo "job a exit $sa: $(tail -1 "$dir/a")"
echo "job b exit $sb: $(tail -1 "$dir/b")"
rm -rf "$dir"
