#!/usr/bin/env bash
# Compile time and peak RSS of the structured-IR issue's plans (a report, not a test): layers
# 32/64/128/256 at hidden 64 (should grow linearly), llama3-8b at dp 1, 8 and 64 with the
# distributed optimizer (global batch 64; dp 64 should cost at most 2x dp 1), and a GPT-175B shape
# (96 layers, hidden 12288, 96 heads, seq 2048, vocab 51200) at dp 1 and dp 1024. Every rank's
# program is compiled, exported and validated in memory; nothing is written.
#   bench/compile_scaling.sh [quick]    quick: skip the GPT-175B dp 1024 plan
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bench="${TRAINC_BUILD_DIR:-$root/build}/bench/bench_compile"
[ -x "$bench" ] || { echo "build it first: ninja -C build bench_compile" >&2; exit 2; }
small=(--hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 --num-query-groups 2
       --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 1)
echo "== layers at hidden 64 (llama-style, 1 rank, 1 microbatch)"
for l in 32 64 128 256; do
  "$bench" --preset llama-tiny-text --num-layers "$l" "${small[@]}" | head -1
done
echo "== llama3-8b, global batch 64, distributed optimizer"
for dp in 1 8 64; do
  "$bench" --preset llama3-8b --micro-batch-size 1 --global-batch-size 64 \
    --data-parallel-size "$dp" --use-distributed-optimizer | head -1
done
gpt=(--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --ffn-hidden-size 49152
     --seq-length 2048 --max-position-embeddings 2048 --vocab-size 51200 --attention-dropout 0
     --micro-batch-size 1)
echo "== GPT-175B shape"
"$bench" --preset gpt2-small "${gpt[@]}" --global-batch-size 1 | head -1
if [ "${1:-}" != "quick" ]; then
  "$bench" --preset gpt2-small "${gpt[@]}" --global-batch-size 1024 --data-parallel-size 1024 | head -1
fi
