#!/usr/bin/env bash
# Runs the loader fuzzer for a bounded time on a seed corpus of valid programs written by
# trainc-rt (the demo program) plus a header-only and a truncated file. Fails on any crash.
#   run_fuzzer.sh FUZZER TRAINC_RT WORKDIR SECONDS
set -euo pipefail
fuzzer="$1"; rt="$2"; work="$3"; seconds="$4"
rm -rf "$work"; mkdir -p "$work/corpus" "$work/artifacts"
"$rt" demo --steps 1 --save-program "$work/corpus/block.pb" >/dev/null
head -c 24 "$work/corpus/block.pb" > "$work/corpus/header-only.pb"
head -c 500 "$work/corpus/block.pb" > "$work/corpus/truncated.pb"
"$fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" 2>&1 | tail -n 20
