#!/usr/bin/env bash
# Mutates a valid rank file CASES times from a fixed seed and fails if any mutant loads. The rank
# file is rank0.pb of a tiny-llama plan written by `trainc compile` when TRAINC is given, else the
# demo program written by trainc-rt. A pass with the checksum restamped after each mutation is
# printed too: it shows how many mutants a loader without the checksum would accept.
#   run_mutation_fuzz.sh FUZZER TRAINC_RT WORKDIR CASES [TRAINC]
set -euo pipefail
fuzzer="$1"; rt="$2"; work="$3"; cases="$4"; trainc="${5:-}"
rm -rf "$work"; mkdir -p "$work"
if [ -n "$trainc" ]; then
  "$trainc" compile --preset tiny-llama --vocab-size 256 --micro-batch-size 2 \
    --global-batch-size 4 --lr 1e-3 --train-iters 2 -o "$work/plan" >/dev/null
  file="$work/plan/rank0.pb"
else
  "$rt" demo --steps 1 --save-program "$work/block.pb" >/dev/null
  file="$work/block.pb"
fi
"$fuzzer" "$file" "$cases" 20261201 --restamp
"$fuzzer" "$file" "$cases" 20261201
