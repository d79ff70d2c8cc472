#!/usr/bin/python3
"""Writes the files llm.c's CPU trainer (train_gpt2.c) reads, for a given GPT shape, so that
bench/train_throughput.sh can time it next to trainc without GPT-2's downloaded weights (issue 17
item 5; docs/kernels.md "Fair PyTorch baseline and the one-run report").

usage: llmc_prepare.py --llmc-src DIR --out DIR (--trainc-plan PLAN_DIR | SHAPE FLAGS)
                       [--seed N] [--train-batches N] [--text FILE]
       llmc_prepare.py --llmc-src DIR --print-facts
  --llmc-src DIR     llm.c's source tree (train_gpt2.c, llmc/dataloader.h, llmc/tokenizer.h). The
                     file names, batch shape (B, T), header magics and versions, the parameter
                     tensors' order and sizes and the architecture facts are read from there; a
                     tree whose train_gpt2.c differs from what this script knows is an error.
  --print-facts      only print train_gpt2's B, T and loop cadence (the first five lines below).
  --out DIR          where train_gpt2 runs (its paths are relative to its working directory):
                     the checkpoint, the tokenizer and the train / val token files.
  --trainc-plan DIR  a trainc plan (DIR/plan.json): its "model" section gives the shape, and the
                     model must be llm.c's architecture (checked, each mismatch named).
  shape flags        instead of --trainc-plan: --num-layers, --hidden-size,
                     --num-attention-heads, --vocab-size, --max-position-embeddings, optional
                     --padded-vocab-size (default: the vocab rounded up to a multiple of 128, as
                     llm.c's train_gpt2.py pads it).
  --seed N           numpy seed for the weights and the random tokens (default 1234).
  --train-batches N  train tokens: N * B * T + 1 (default 64); val: val_num_batches * B * T + 1.
  --text FILE        tokens are FILE's bytes (byte-level, needs vocab >= 256), the first 90% for
                     train, the rest for val, each cut or repeated to its size; default: uniform
                     random tokens below the vocab size.

The weights are random (GPT-2-style: normal std 0.02; the attention and MLP output projections
0.02 / sqrt(2 * layers) as Megatron's scaled_init_method_normal and GPT-2; layer-norm weights 1,
biases 0; the padded vocabulary rows of the token embedding 0, as llm.c's exporter pads): this
machine cannot download GPT-2's. The timing does not depend on the values.

Prints "llmc KEY: VALUE" lines for the bench: B, T, the validation / sampling cadence and last
step of train_gpt2's loop, the checkpoint's parameter count (llm.c's: the padded vocabulary
included) and the training FLOPs per token of one step (matmuls and causal attention, backward
2x forward), and the step-0 loss expected of such an init (ln vocab). Errors go to stderr with
exit status 2 and name the value and what was expected.
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np

# What this script writes, and the values it requires train_gpt2.c and its headers to read.
CHECKPOINT_MAGIC, CHECKPOINT_VERSION = 20240326, 3  # fp32 parameters, padded vocabulary
DATA_MAGIC, DATA_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2  # version 2 carries the EOT token id
HEADER_INTS = 256
PAD_MULTIPLE = 128

# train_gpt2.c's parameter tensors by their comment names, and how each is initialised.
NORMAL = ("wte", "wpe", "qkvw", "fcw")
SCALED = ("attprojw", "fcprojw")  # residual-stream output projections
ONES = ("ln1w", "ln2w", "lnfw")
ZEROS = ("ln1b", "ln2b", "lnfb", "qkvb", "attprojb", "fcb", "fcprojb")


class PrepareError(Exception):
    pass


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise PrepareError(f"cannot read {path}: {e.strerror}") from None


def find(pattern, text, path, what):
    """The first group of `pattern` in `text`; names the fact and the file when it is missing."""
    m = re.search(pattern, text)
    if not m:
        raise PrepareError(f"{path}: cannot find {what} (searched for /{pattern}/); this script "
                           f"knows llm.c's CPU trainer with checkpoint version {CHECKPOINT_VERSION}")
    return m.group(1)


def expect_int(pattern, text, path, what, expected):
    value = int(find(pattern, text, path, what))
    if value != expected:
        raise PrepareError(f"{path}: {what} is {value}, this script writes {expected}")


def source_facts(src):
    """What train_gpt2.c in `src` reads and does: file names, B and T, loop cadence, the
    parameter tensors (name, size expression) in checkpoint order. Raises PrepareError."""
    train = os.path.join(src, "train_gpt2.c")
    if not os.path.isfile(train):
        raise PrepareError(f"--llmc-src {src}: no train_gpt2.c there (expected llm.c's source tree)")
    t = read_text(train)
    loader_h = os.path.join(src, "llmc", "dataloader.h")
    tok_h = os.path.join(src, "llmc", "tokenizer.h")
    d, k = read_text(loader_h), read_text(tok_h)
    expect_int(r"int model_header\[(\d+)\]", t, train, "the checkpoint header's int count", HEADER_INTS)
    expect_int(r"model_header\[0\]\s*!=\s*(\d+)", t, train, "the checkpoint magic", CHECKPOINT_MAGIC)
    expect_int(r"model_header\[1\]\s*!=\s*(\d+)", t, train, "the checkpoint version", CHECKPOINT_VERSION)
    expect_int(r"#define HEADER_SIZE (\d+)", d, loader_h, "the data header's int count", HEADER_INTS)
    expect_int(r"header\[0\]\s*!=\s*(\d+)", d, loader_h, "the data magic", DATA_MAGIC)
    expect_int(r"header\[1\]\s*!=\s*(\d+)", d, loader_h, "the data version", DATA_VERSION)
    expect_int(r"header\[0\]\s*==\s*(\d+)", k, tok_h, "the tokenizer magic", TOKENIZER_MAGIC)
    find(r"(version == 2)", k, tok_h, "tokenizer version 2 (with the EOT id)")
    # The architecture facts the model check relies on.
    find(r"(float eps = 1e-5f;)", t, train, "layer norm's epsilon 1e-5")
    find(r"(tanhf\(GELU_SCALING_FACTOR)", t, train, "GELU in its tanh form")
    find(r"(matmul_forward\(acts\.logits, acts\.lnf, params\.wte)", t, train,
         "the logits from the token embedding (tied)")
    if re.search(r"dropout", t, re.IGNORECASE):
        raise PrepareError(f"{train}: mentions dropout; this script assumes a model without it")
    sizes = re.findall(r"param_sizes\[(\d+)\]\s*=\s*([A-Za-z0-9_*() ]+);\s*//\s*(\w+)", t)
    if not sizes or [int(i) for i, _, _ in sizes] != list(range(len(sizes))):
        raise PrepareError(f"{train}: cannot read the parameter tensors 'param_sizes[i] = ...; // name'")
    return {
        "checkpoint": find(r'gpt2_build_from_checkpoint\(&model,\s*"([^"]+)"\)', t, train,
                           "the checkpoint file name"),
        "tokenizer": find(r'tokenizer_init\(&tokenizer,\s*"([^"]+)"\)', t, train,
                          "the tokenizer file name"),
        "train_data": find(r'tiny_shakespeare_train\s*=\s*"([^"]+)"', t, train, "the train data path"),
        "val_data": find(r'tiny_shakespeare_val\s*=\s*"([^"]+)"', t, train, "the val data path"),
        "B": int(find(r"\bint B\s*=\s*(\d+);", t, train, "the batch size 'int B = N;'")),
        "T": int(find(r"\bint T\s*=\s*(\d+);", t, train, "the sequence length 'int T = N;'")),
        "val_num_batches": int(find(r"\bint val_num_batches\s*=\s*(\d+);", t, train,
                                    "'int val_num_batches = N;'")),
        "val_every": int(find(r"if \(step % (\d+) == 0\)", t, train, "the validation cadence")),
        "sample_every": int(find(r"step > 0 && step % (\d+) == 0", t, train, "the sampling cadence")),
        "last_step": int(find(r"step <= (\d+);", t, train, "the last step")),
        "tensors": [(name, expr) for _, expr, name in sizes],
    }


def shape_from_plan(plan_dir):
    """The model shape of a trainc plan, checked to be llm.c's GPT-2 architecture (train_gpt2.c:
    learned positions, LayerNorm eps 1e-5, tanh GELU, 4x MLP, biases, tied embeddings, multi-head
    attention, no dropout). Raises PrepareError naming each mismatch."""
    path = os.path.join(plan_dir, "plan.json")
    try:
        with open(path) as f:
            model = json.load(f)["model"]
    except (OSError, ValueError, KeyError) as e:
        raise PrepareError(f"--trainc-plan {plan_dir}: cannot read the model of {path} ({e})") from None
    get = lambda key: str(model.get(key, "<missing>"))
    num = lambda key: float(model[key]) if key in model else float("nan")
    h, heads = int(num("hidden_size")), int(num("num_attention_heads"))
    required = [
        ("position_embedding_type", get("position_embedding_type") == "learned_absolute",
         "learned_absolute"),
        ("normalization", get("normalization") == "LayerNorm", "LayerNorm"),
        ("norm_epsilon", num("norm_epsilon") == 1e-5, "1e-05"),
        ("swiglu", get("swiglu") == "false", "false"),
        ("gelu_tanh", get("gelu_tanh") == "true", "true (the tanh form)"),
        ("add_bias_linear", get("add_bias_linear") == "true", "true"),
        ("untie_embeddings_and_output_weights",
         get("untie_embeddings_and_output_weights") == "false", "false (tied)"),
        ("attention_dropout", num("attention_dropout") == 0, "0"),
        ("hidden_dropout", num("hidden_dropout") == 0, "0"),
        ("ffn_hidden_size", num("ffn_hidden_size") == 4 * h, f"4 x hidden_size = {4 * h}"),
        ("num_query_groups", num("num_query_groups") == heads, f"num_attention_heads = {heads}"),
    ]
    bad = [f"{key} is {get(key)}, llm.c's GPT-2 needs {want}" for key, ok, want in required if not ok]
    if bad:
        raise PrepareError(f"--trainc-plan {plan_dir}: not llm.c's architecture: " + "; ".join(bad))
    return {"L": int(num("num_layers")), "C": h, "NH": heads, "V": int(num("vocab_size")),
            "Vp": int(num("padded_vocab_size")), "maxT": int(num("max_position_embeddings"))}


def check_shape(s, facts):
    for key, flag in (("L", "--num-layers"), ("C", "--hidden-size"), ("NH", "--num-attention-heads"),
                      ("V", "--vocab-size"), ("maxT", "--max-position-embeddings")):
        if s[key] < 1:
            raise PrepareError(f"{flag} {s[key]} must be >= 1")
    if s["C"] % s["NH"]:
        raise PrepareError(f"--hidden-size {s['C']} is not divisible by --num-attention-heads {s['NH']}")
    if s["V"] > 65536:
        raise PrepareError(f"--vocab-size {s['V']} does not fit llm.c's uint16 token files (<= 65536)")
    if s["Vp"] < s["V"]:
        raise PrepareError(f"--padded-vocab-size {s['Vp']} is below --vocab-size {s['V']}")
    if facts["T"] > s["maxT"]:
        raise PrepareError(f"train_gpt2.c's T = {facts['T']} exceeds --max-position-embeddings "
                           f"{s['maxT']}")


def tensor_sizes(facts, s):
    """(name, elements) per checkpoint tensor, from train_gpt2.c's own size expressions."""
    env = {"Vp": s["Vp"], "C": s["C"], "maxT": s["maxT"], "L": s["L"]}
    out = []
    for name, expr in facts["tensors"]:
        if not re.fullmatch(r"[A-Za-z0-9_*() ]+", expr) or \
                set(re.findall(r"[A-Za-z_]\w*", expr)) - set(env):
            raise PrepareError(f"train_gpt2.c: size of {name} '{expr}' uses unknown names "
                               f"(known: {', '.join(env)})")
        out.append((name, int(eval(expr, {"__builtins__": {}}, env))))
    return out


def write_checkpoint(path, facts, s, rng):
    """llm.c's checkpoint: 256 int32 header (magic, version, maxT, V, L, NH, C, Vp), then every
    tensor's fp32 values in train_gpt2.c's order. Returns the parameter count."""
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:8] = [CHECKPOINT_MAGIC, CHECKPOINT_VERSION, s["maxT"], s["V"], s["L"], s["NH"], s["C"],
                  s["Vp"]]
    scaled_std = 0.02 / math.sqrt(2 * s["L"])
    total = 0
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, n in tensor_sizes(facts, s):
            if name in NORMAL or name in SCALED:
                x = rng.standard_normal(n, dtype=np.float32)
                x *= np.float32(scaled_std if name in SCALED else 0.02)
                if name == "wte":
                    x[s["V"] * s["C"]:] = 0  # the padded rows
            elif name in ONES:
                x = np.ones(n, dtype=np.float32)
            elif name in ZEROS:
                x = np.zeros(n, dtype=np.float32)
            else:
                raise PrepareError(f"train_gpt2.c: parameter tensor '{name}' is not one this script "
                                   f"knows how to initialise")
            f.write(x.tobytes())
            total += n
    return total


def write_tokens(path, tokens):
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:3] = [DATA_MAGIC, DATA_VERSION, len(tokens)]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def token_streams(args, s, n_train, n_val, rng):
    if not args.text:
        return (rng.integers(0, s["V"], n_train, dtype=np.int64),
                rng.integers(0, s["V"], n_val, dtype=np.int64))
    if s["V"] < 256:
        raise PrepareError(f"--text needs --vocab-size >= 256 (byte tokens), not {s['V']}")
    try:
        data = np.fromfile(args.text, dtype=np.uint8).astype(np.int64)
    except OSError as e:
        raise PrepareError(f"--text {args.text}: {e.strerror}") from None
    if len(data) < 20:
        raise PrepareError(f"--text {args.text} has {len(data)} bytes, expected at least 20")
    cut = len(data) * 9 // 10
    fit = lambda a, n: np.resize(a, n)  # repeats or truncates
    return fit(data[:cut], n_train), fit(data[cut:], n_val)


def write_tokenizer(path, vocab):
    """Tokenizer version 2: header (magic, version, vocab, EOT = vocab - 1), then per token a
    length byte and its bytes (a byte for ids below 256, "<id>" above). train_gpt2.c only decodes
    with it when it samples text; without the file it would sample from an unset EOT id."""
    header = np.zeros(HEADER_INTS, dtype=np.uint32)
    header[:4] = [TOKENIZER_MAGIC, TOKENIZER_VERSION, vocab, vocab - 1]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for i in range(vocab):
            b = bytes([i]) if i < 256 else f"<{i}>".encode()
            f.write(bytes([len(b)]) + b)


def training_flops_per_token(s, T):
    """One training step's FLOPs per token: 2 per multiply-add of the linear layers and logits
    (padded vocabulary, as train_gpt2.c multiplies) and of causal attention (the T(T+1)/2 query /
    key pairs of train_gpt2.c's loops, QK^T and AV); backward 2x forward."""
    L, C, Vp = s["L"], s["C"], s["Vp"]
    linear = L * (3 * C * C + C * C + 4 * C * C + 4 * C * C) + Vp * C
    attention = L * 2 * C * (T + 1) / 2
    return 3 * 2 * (linear + attention)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llmc-src", required=True)
    p.add_argument("--out")
    p.add_argument("--print-facts", action="store_true")
    p.add_argument("--trainc-plan")
    p.add_argument("--num-layers", type=int)
    p.add_argument("--hidden-size", type=int)
    p.add_argument("--num-attention-heads", type=int)
    p.add_argument("--vocab-size", type=int)
    p.add_argument("--max-position-embeddings", type=int)
    p.add_argument("--padded-vocab-size", type=int)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--train-batches", type=int, default=64)
    p.add_argument("--text")
    return p.parse_args(argv)


def shape_from_args(args):
    flags = {"L": args.num_layers, "C": args.hidden_size, "NH": args.num_attention_heads,
             "V": args.vocab_size, "maxT": args.max_position_embeddings}
    if args.trainc_plan:
        given = [k for k, v in flags.items() if v is not None] + \
            (["Vp"] if args.padded_vocab_size is not None else [])
        if given:
            raise PrepareError("--trainc-plan gives the shape: drop the shape flags")
        return shape_from_plan(args.trainc_plan)
    missing = [f for f, v in (("--num-layers", args.num_layers), ("--hidden-size", args.hidden_size),
                              ("--num-attention-heads", args.num_attention_heads),
                              ("--vocab-size", args.vocab_size),
                              ("--max-position-embeddings", args.max_position_embeddings))
               if v is None]
    if missing:
        raise PrepareError("without --trainc-plan, give " + ", ".join(missing))
    v = args.vocab_size
    flags["Vp"] = args.padded_vocab_size if args.padded_vocab_size is not None else \
        -(-v // PAD_MULTIPLE) * PAD_MULTIPLE
    return flags


def main(argv):
    args = parse_args(argv)
    facts = source_facts(args.llmc_src)
    loop = {"B": facts["B"], "T": facts["T"], "val_every": facts["val_every"],
            "sample_every": facts["sample_every"], "last_step": facts["last_step"]}
    if args.print_facts:
        for key, value in loop.items():
            print(f"llmc {key}: {value}")
        return
    if not args.out:
        raise PrepareError("give --out DIR (or --print-facts)")
    s = shape_from_args(args)
    check_shape(s, facts)
    if args.train_batches < 1:
        raise PrepareError(f"--train-batches {args.train_batches} must be >= 1")
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    out = lambda rel: os.path.join(args.out, rel)
    params = write_checkpoint(out(facts["checkpoint"]), facts, s, rng)
    bt = facts["B"] * facts["T"]
    train, val = token_streams(args, s, args.train_batches * bt + 1,
                               facts["val_num_batches"] * bt + 1, rng)
    write_tokens(out(facts["train_data"]), train)
    write_tokens(out(facts["val_data"]), val)
    write_tokenizer(out(facts["tokenizer"]), s["V"])
    report = {**loop, "num_layers": s["L"], "hidden_size": s["C"], "num_attention_heads": s["NH"],
              "vocab_size": s["V"], "padded_vocab_size": s["Vp"],
              "max_position_embeddings": s["maxT"], "num_parameters": params,
              "flops_per_token": f"{training_flops_per_token(s, facts['T']):.0f}",
              "expected_initial_loss": f"{math.log(s['V']):.3f}"}
    for key, value in report.items():
        print(f"llmc {key}: {value}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except PrepareError as e:
        print(f"llmc_prepare.py: error: {e}", file=sys.stderr)
        sys.exit(2)
