"""An independent byte-level BPE for Hugging Face tokenizer.json files (the reference that
HuggingFaceTokenizer is tested against; written from the tokenizers library's documented
behaviour, sharing no code with trainc).

  hf_bpe_reference.py train CORPUS OUT_DIR [--merges N] [--pairs] [--prefix-space] [--bos]
      learns N byte-level BPE merges on CORPUS (pre-tokenized with GPT-2's pattern) and writes
      OUT_DIR/tokenizer.json: the 256 byte symbols, the merges ("a b" strings, or ["a", "b"] pairs
      with --pairs), the added tokens <|endoftext|> (special) and <sep> (not special); with --bos
      also <s> and a TemplateProcessing post-processor that puts <s> first.
  hf_bpe_reference.py encode TOKENIZER_JSON LINES
      prints the ids of every line of LINES (UTF-8, newline removed), space separated.

Encoding: added tokens split the text first (leftmost, longest); each remaining piece gets a
leading space when add_prefix_space is set and it does not start with one, is split by GPT-2's
pattern, mapped to byte symbols, and merged with a priority queue: repeatedly the pair of lowest
merge rank (leftmost on ties) among adjacent symbols.
"""
import heapq
import json
import sys

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def byte_symbols():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTES = byte_symbols()


def symbols(piece):
    return [BYTES[b] for b in piece.encode("utf-8")]


def train(corpus, out_dir, merges, pairs, prefix_space, bos):
    words = {}
    for line in open(corpus, encoding="utf-8"):
        line = line.rstrip("\n")
        if prefix_space and line and not line.startswith(" "):
            line = " " + line
        for w in PATTERN.findall(line):
            key = tuple(symbols(w))
            words[key] = words.get(key, 0) + 1
    vocab = {BYTES[b]: b for b in range(256)}
    learned = []
    for _ in range(merges):
        counts = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        learned.append(best)
        vocab.setdefault(best[0] + best[1], len(vocab))
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    added = [{"id": len(vocab), "content": "<|endoftext|>", "special": True},
             {"id": len(vocab) + 1, "content": "<sep>", "special": False}]
    post = {"type": "ByteLevel", "add_prefix_space": prefix_space, "trim_offsets": True,
            "use_regex": True}
    if bos:
        added.append({"id": len(vocab) + 2, "content": "<s>", "special": True})
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [len(vocab) + 2],
                                                       "tokens": ["<s>"]}}}
    for a in added:
        a.update({"single_word": False, "lstrip": False, "rstrip": False, "normalized": False})
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": prefix_space,
                          "trim_offsets": True, "use_regex": True},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": [list(m) if pairs else m[0] + " " + m[1] for m in learned]},
    }
    with open(out_dir + "/tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)


def bpe(word, ranks):
    syms = list(word)
    alive = [True] * len(syms)
    nxt = list(range(1, len(syms) + 1))
    prv = list(range(-1, len(syms) - 1))
    heap = []
    for i in range(len(syms) - 1):
        r = ranks.get((syms[i], syms[i + 1]))
        if r is not None:
            heapq.heappush(heap, (r, i, syms[i], syms[i + 1]))
    while heap:
        r, i, a, b = heapq.heappop(heap)
        j = nxt[i] if i < len(syms) else None
        if not alive[i] or j is None or j >= len(syms) or syms[i] != a or syms[j] != b:
            continue  # stale entry
        syms[i] = a + b
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[i] < len(syms):
            prv[nxt[i]] = i
        p = prv[i]
        if p >= 0:
            rp = ranks.get((syms[p], syms[i]))
            if rp is not None:
                heapq.heappush(heap, (rp, p, syms[p], syms[i]))
        if nxt[i] < len(syms):
            rn = ranks.get((syms[i], syms[nxt[i]]))
            if rn is not None:
                heapq.heappush(heap, (rn, i, syms[i], syms[nxt[i]]))
    return [s for s, ok in zip(syms, alive) if ok]


def encode(tok_file, lines_file):
    tok = json.load(open(tok_file, encoding="utf-8"))
    model = tok["model"]
    vocab = model["vocab"]
    ranks = {}
    for r, m in enumerate(model["merges"]):
        pair = tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
        ranks.setdefault(pair, r)
    added = sorted(tok["added_tokens"], key=lambda a: -len(a["content"]))
    prefix_space = tok["pre_tokenizer"].get("add_prefix_space", False)
    pre, post = [], []
    pp = tok.get("post_processor") or {}
    if pp.get("type") == "TemplateProcessing":
        seen = False
        for item in pp["single"]:
            if "Sequence" in item:
                seen = True
            else:
                (post if seen else pre).extend(pp["special_tokens"][item["SpecialToken"]["id"]]["ids"])

    def plain(text, out):
        if not text:
            return
        if prefix_space and not text.startswith(" "):
            text = " " + text
        for w in PATTERN.findall(text):
            out.extend(vocab[s] for s in bpe(symbols(w), ranks))

    for line in open(lines_file, encoding="utf-8"):
        text = line.rstrip("\n")
        out = list(pre)
        i = start = 0
        while i < len(text):
            hit = next((a for a in added if text.startswith(a["content"], i)), None)
            if hit is None:
                i += 1
                continue
            plain(text[start:i], out)
            out.append(hit["id"])
            i += len(hit["content"])
            start = i
        plain(text[start:], out)
        out.extend(post)
        print(" ".join(map(str, out)))


if __name__ == "__main__":
    if sys.argv[1] == "train":
        args = sys.argv[2:]
        n = int(args[args.index("--merges") + 1]) if "--merges" in args else 300
        train(args[0], args[1], n, "--pairs" in args, "--prefix-space" in args, "--bos" in args)
    else:
        encode(sys.argv[2], sys.argv[3])
