#!/usr/bin/env bash
# Preprocess throughput and the data loader's share of an iteration (a report, not a test;
# data pipeline issue): builds a jsonl corpus from /usr/share/common-licenses (repeated to
# ~5 MB), runs tools/preprocess_data with the byte tokenizer (and GPT-2 BPE when
# GPT2_VOCAB/GPT2_MERGES name a vocab.json/merges.txt), SentencePiece (a model trained with
# spm_train on the licenses) and HuggingFaceTokenizer (a tokenizer.json trained by
# tests/data/hf_bpe_reference.py) at 1 and 2 workers; then trains tiny-llama for 50 iterations
# from the .bin/.idx prefix and from --mock-data (no data reads) and reports the iteration times,
# and bench_data_loader's cost of reading one global batch: their ratio is the data loader's share
# of an iteration (trainrun reads the batch on the iteration's critical path).
#   bench/preprocess_throughput.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TRAINC_BUILD_DIR:-$root/build}/tools"
[ -x "$bin/preprocess_data" ] || { echo "build it first: scripts/build.sh" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/corpus.jsonl" <<'PY'
import glob, json, sys
docs = [open(f, errors="replace").read() for f in sorted(glob.glob("/usr/share/common-licenses/*"))
        if not f.endswith(".gz")]
with open(sys.argv[1], "w") as out:
    size = 0
    while size < 5_000_000:
        for d in docs:
            line = json.dumps({"text": d}) + "\n"
            out.write(line)
            size += len(line)
PY
echo "== preprocess_data ($(du -h "$work/corpus.jsonl" | cut -f1) jsonl)"
tokenizers=("ByteTokenizer")
if [ -n "${GPT2_VOCAB:-}" ] && [ -n "${GPT2_MERGES:-}" ]; then tokenizers+=("GPT2BPETokenizer"); fi
cat /usr/share/common-licenses/* 2>/dev/null | grep -v '^[[:space:]]*$' > "$work/lines.txt" || true
if command -v spm_train >/dev/null; then
  spm_train --input="$work/lines.txt" --model_prefix="$work/sp" --vocab_size=2000 \
    --minloglevel=2 >/dev/null 2>&1 && tokenizers+=("SentencePieceTokenizer")
fi
/usr/bin/python3 "$root/tests/data/hf_bpe_reference.py" train "$work/lines.txt" "$work" \
  --merges 1000 && tokenizers+=("HuggingFaceTokenizer")
for tok in "${tokenizers[@]}"; do
  echo "  $tok:"
  for w in 1 2; do
    extra=()
    [ "$tok" = GPT2BPETokenizer ] && extra=(--vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES")
    [ "$tok" = SentencePieceTokenizer ] && extra=(--tokenizer-model "$work/sp.model")
    [ "$tok" = HuggingFaceTokenizer ] && extra=(--tokenizer-model "$work/tokenizer.json")
    "$bin/preprocess_data" --input "$work/corpus.jsonl" --output-prefix "$work/c_${tok}_$w" \
      --tokenizer-type "$tok" "${extra[@]}" --append-eod --workers "$w" --log-interval 1000000000 \
      2>&1 >/dev/null | sed -n 's/^preprocess_data: /  /p'
  done
done
echo "== data loader share (tiny-llama, .bin/.idx data, 50 iterations)"
"$bin/trainc" compile --preset tiny-llama --vocab-size 256 --micro-batch-size 4 \
  --global-batch-size 16 --lr 1e-3 --train-iters 50 --eval-iters 0 -o "$work/plan" > /dev/null
for data in "--data-path $work/c_ByteTokenizer_1_text_document" "--mock-data"; do
  # shellcheck disable=SC2086
  "$bin/trainrun" "$work/plan" -- $data --log-interval 25 > "$work/train.log"
  # The second interval (iterations 26-50), after warm-up.
  t=$(grep -o 'elapsed time per iteration (ms): [0-9.]*' "$work/train.log" | tail -1 | awk '{print $NF}')
  echo "  ${data%% *}: $t ms per iteration"
  [ "$data" = "--mock-data" ] || iter_ms=$t
done
loader="${TRAINC_BUILD_DIR:-$root/build}/bench/bench_data_loader"
if [ -x "$loader" ]; then
  # tiny-llama: seq_length 9; the plan above: global batch 16.
  out=$("$loader" "$work/c_ByteTokenizer_1_text_document" 9 16 50)
  echo "$out"
  batch_ms=$(echo "$out" | sed -n 's/.*loader: \([0-9.]*\) ms per global batch.*/\1/p')
  awk -v b="$batch_ms" -v i="$iter_ms" \
    'BEGIN { printf "  data loader share of an iteration: %.2f%% (%.3f ms of %.1f ms)\n", 100 * b / i, b, i }'
else
  echo "  (ninja -C build bench_data_loader for the loader's own cost per batch)"
fi
