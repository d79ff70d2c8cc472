#!/usr/bin/env bash
# Preprocess throughput and the data loader's share of an iteration (a report, not a test;
# data pipeline issue): builds a jsonl corpus from /usr/share/common-licenses (repeated to
# ~5 MB), runs tools/preprocess_data with the byte tokenizer (and GPT-2 BPE when
# GPT2_VOCAB/GPT2_MERGES name a vocab.json/merges.txt) at 1 and 2 workers, then trains tiny-llama
# for 50 iterations from the .bin/.idx prefix and from --mock-data (no data reads) and reports the
# iteration times: their difference is the data loader's share.
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
for tok in "${tokenizers[@]}"; do
  for w in 1 2; do
    extra=()
    [ "$tok" = GPT2BPETokenizer ] && extra=(--vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES")
    "$bin/preprocess_data" --input "$work/corpus.jsonl" --output-prefix "$work/c_$w" \
      --tokenizer-type "$tok" "${extra[@]}" --append-eod --workers "$w" --log-interval 1000000000 \
      2>&1 >/dev/null | sed -n 's/^preprocess_data: /  /p'
  done
done
echo "== data loader share (tiny-llama, .bin/.idx data, 50 iterations)"
"$bin/trainc" compile --preset tiny-llama --vocab-size 256 --micro-batch-size 4 \
  --global-batch-size 16 --lr 1e-3 --train-iters 50 --eval-iters 0 -o "$work/plan" > /dev/null
for data in "--data-path $work/c_1_text_document" "--mock-data"; do
  # shellcheck disable=SC2086
  "$bin/trainrun" "$work/plan" -- $data --log-interval 25 > "$work/train.log"
  # The second interval (iterations 26-50), after warm-up.
  t=$(grep -o 'elapsed time per iteration (ms): [0-9.]*' "$work/train.log" | tail -1 | awk '{print $NF}')
  echo "  ${data%% *}: $t ms per iteration"
done
