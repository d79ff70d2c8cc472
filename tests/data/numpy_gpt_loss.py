#!/usr/bin/env python3
"""The first iteration's loss of a GPT plan (LayerNorm, learned positions, biased linears, GELU
MLP) recomputed with numpy in float64, with the tanh GELU (Megatron's fused bias_gelu:
0.5 x (1 + tanh(0.79788456 x (1 + 0.044715 x^2)))) and with F.gelu's erf form, and compared with
trainc's logged loss.

Usage: numpy_gpt_loss.py PLAN_DIR DUMP_DIR
DUMP_DIR holds trainrun --dump-dir's initial_weights.safetensors, batches.bin and losses.txt of a
one-rank fp64 run on mock data (every label counts). Prints the three losses and
"ok: trainc computes the <tanh|erf> GELU, as plan.json's model.gelu_tanh says"; exits 1 when
trainc's loss is not within 1e-9 (relative) of the form the plan names, or within 1e-7 of the
other one (the case must separate them).
"""
import json
import math
import struct
import sys

import numpy as np


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "F64": np.float64}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dt).reshape(t["shape"])
    return out


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(0.79788456 * x * (1.0 + 0.044715 * x * x)))


def gelu_erf(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def loss(P, m, tokens, labels, gelu):
    L, H, NH = int(m["num_layers"]), int(m["hidden_size"]), int(m["num_attention_heads"])
    D, V, eps = H // NH, int(m["vocab_size"]), float(m["norm_epsilon"])
    B, S = tokens.shape
    x = P["embedding.word_embeddings.weight"][tokens] + \
        P["embedding.position_embeddings.weight"][np.arange(S)][None]
    causal = np.tril(np.ones((S, S), dtype=bool))
    lin = lambda h, p: h @ P[p + ".weight"].T + P[p + ".bias"]
    for l in range(L):
        p = f"decoder.layers.{l}."
        h = layer_norm(x, P[p + "input_layernorm.weight"], P[p + "input_layernorm.bias"], eps)
        q, k, v = (lin(h, p + f"self_attention.linear_{n}").reshape(B, S, NH, D).transpose(0, 2, 1, 3)
                   for n in "qkv")
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D)
        s = np.where(causal, s, -np.inf)
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = (pr @ v).transpose(0, 2, 1, 3).reshape(B, S, H)
        x = x + lin(o, p + "self_attention.linear_proj")
        h2 = layer_norm(x, P[p + "pre_mlp_layernorm.weight"], P[p + "pre_mlp_layernorm.bias"], eps)
        x = x + lin(gelu(lin(h2, p + "mlp.linear_fc1")), p + "mlp.linear_fc2")
    hf = layer_norm(x, P["decoder.final_layernorm.weight"], P["decoder.final_layernorm.bias"], eps)
    w = P.get("output_layer.weight", P["embedding.word_embeddings.weight"])
    logits = (hf @ w.T)[..., :V]  # the padded columns are outside the softmax
    mx = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - mx).sum(-1)) + mx[..., 0]
    picked = np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def main():
    plan_dir, dump = sys.argv[1], sys.argv[2]
    m = json.load(open(plan_dir + "/plan.json"))["model"]
    gbs = int(json.load(open(plan_dir + "/plan.json"))["training"]["global_batch_size"])
    S = int(m["seq_length"])
    P = {k: v.astype(np.float64) for k, v in
         read_safetensors(dump + "/initial_weights.safetensors").items()}
    sample = np.fromfile(dump + "/batches.bin", dtype=np.int32)[:gbs * (S + 1)].reshape(gbs, S + 1)
    tokens, labels = sample[:, :S].astype(np.int64), sample[:, 1:].astype(np.int64)
    trainc = float(open(dump + "/losses.txt").readline().split()[1])
    lt, le = loss(P, m, tokens, labels, gelu_tanh), loss(P, m, tokens, labels, gelu_erf)
    print(f"trainc {trainc:.15g}  numpy tanh {lt:.15g}  numpy erf {le:.15g}")
    want_tanh = m["gelu_tanh"] == "true"
    want, other = (lt, le) if want_tanh else (le, lt)
    rel = lambda a, b: abs(a - b) / abs(b)
    if rel(trainc, want) > 1e-9 or rel(trainc, other) < 1e-7:
        print(f"MISMATCH: relative difference {rel(trainc, want):.3g} to the expected form, "
              f"{rel(trainc, other):.3g} to the other")
        sys.exit(1)
    print(f"ok: trainc computes the {'tanh' if want_tanh else 'erf'} GELU, as plan.json's "
          f"model.gelu_tanh says")


if __name__ == "__main__":
    main()
