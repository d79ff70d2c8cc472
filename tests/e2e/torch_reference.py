#!/usr/bin/env python3
"""Independent PyTorch reference for a trainc training run.

Rebuilds the model a trainc plan describes (plan.json) in PyTorch eager, loads the initial weights
trainrun dumped (--dump-dir), trains on the very batches trainrun used (batches.bin) with
torch.optim.AdamW and torch.nn.utils.clip_grad_norm_, and checks

  * every loss of the first N iterations against losses.txt (relative difference <= rtol),
  * the pre-clipping global gradient norm against losses.txt (reported, and checked with rtol),
  * every parameter after N steps against final_weights.safetensors
    (relative L2 difference ||ref - trainc|| / ||ref|| <= rtol).

The model follows models/ModelBuilder.cpp and the CPU kernels (runtime/cpu/*.cpp):

  Llama (rope, RMSNorm, SwiGLU, no biases, untied output layer) and GPT (learned positions,
  LayerNorm, GeLU, biases, tied output layer) as Megatron-LM defines them; dropout must be 0.
  loss = sum over the global batch of mask * CE / sum(mask) (calculate_per_token_loss), logits
  columns >= vocab_size (the padding of the vocabulary) excluded from the softmax.

Only the standard library, numpy and torch are used (no safetensors package). Exit status: 0 when
everything matches, 1 on a mismatch, 2 on a usage or input error.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------
# Input files
# ----------------------------------------------------------------------------------------------

_ST_DTYPES = {
    "F64": (np.float64, torch.float64),
    "F32": (np.float32, torch.float32),
    "F16": (np.float16, torch.float16),
    "I64": (np.int64, torch.int64),
    "I32": (np.int32, torch.int32),
}


def read_safetensors(path):
    """Returns {name: torch.Tensor} of a .safetensors file (little-endian, as the format says)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len].decode("utf-8"))
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = info["dtype"], info["shape"]
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        if dtype == "BF16":
            u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32)
        elif dtype in _ST_DTYPES:
            arr = np.frombuffer(raw, dtype=np.dtype(_ST_DTYPES[dtype][0]).newbyteorder("<"))
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        count = int(np.prod(shape)) if shape else 1
        if arr.size != count:
            raise ValueError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        out[name] = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("="), copy=True)).reshape(shape)
    return out


def read_losses(path):
    """losses.txt: `iteration loss grad_norm lr` per line."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            rows.append((int(parts[0]), float(parts[1]), float(parts[2]), float(parts[3])))
    return rows


def read_batches(path, gbs, seq):
    raw = np.fromfile(path, dtype="<i4")
    per_iter = gbs * (seq + 1)
    if raw.size % per_iter:
        raise ValueError(f"{path}: {raw.size} tokens is not a multiple of {gbs} x {seq + 1}")
    return torch.from_numpy(raw.astype(np.int64)).reshape(-1, gbs, seq + 1)


def as_bool(s):
    return str(s).lower() in ("true", "1", "yes")


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------

class Config:
    def __init__(self, plan):
        m, t = plan["model"], plan["training"]
        self.family = m.get("family", "")
        self.L = int(m["num_layers"])
        self.H = int(m["hidden_size"])
        self.NH = int(m["num_attention_heads"])
        groups = int(m.get("num_query_groups", "0") or 0)
        self.NG = groups if as_bool(m.get("group_query_attention", "false")) and groups > 0 else self.NH
        kv = int(m.get("kv_channels", "0") or 0)
        self.D = kv if kv > 0 else self.H // self.NH
        self.F = int(m["ffn_hidden_size"])
        self.V = int(m["vocab_size"])
        self.Vp = int(m["padded_vocab_size"])
        self.S = int(m["seq_length"])
        self.S_max = int(m.get("max_position_embeddings", self.S))
        self.eps = float(m["norm_epsilon"])
        self.rope = m["position_embedding_type"] == "rope"
        self.rotary_base = float(m.get("rotary_base", "10000"))
        self.rotary_percent = float(m.get("rotary_percent", "1"))
        self.rms = m["normalization"] == "RMSNorm"
        self.swiglu = as_bool(m["swiglu"])
        self.bias = as_bool(m["add_bias_linear"])
        self.untied = as_bool(m["untie_embeddings_and_output_weights"])
        # The GELU trainc compiled (Megatron's choice: the tanh form with --openai-gelu or the
        # bias-GELU fusion, else erf).
        self.openai_gelu = as_bool(m.get("gelu_tanh", m.get("openai_gelu", "false")))
        self.gbs = int(t["global_batch_size"])
        self.mbs = int(t["micro_batch_size"])
        self.beta1 = float(t["adam_beta1"])
        self.beta2 = float(t["adam_beta2"])
        self.adam_eps = float(t["adam_eps"])
        self.weight_decay = float(t["weight_decay"])
        self.clip_grad = float(t["clip_grad"])
        self.per_token_loss = as_bool(t.get("calculate_per_token_loss", "true"))
        problems = []
        if float(m.get("hidden_dropout", "0")) != 0 or float(m.get("attention_dropout", "0")) != 0:
            problems.append("dropout > 0 (the reference has no trainc-identical dropout RNG)")
        if as_bool(m.get("use_rope_scaling", "false")):
            problems.append("use_rope_scaling (llama3 RoPE scaling) is not modelled")
        if t.get("optimizer", "adam") != "adam":
            problems.append(f"optimizer {t.get('optimizer')} (only adam)")
        if t.get("recompute_granularity", "none") not in ("none", "", "selective", "full"):
            problems.append(f"recompute_granularity {t.get('recompute_granularity')}")
        if problems:
            raise ValueError("plan not supported by the reference: " + "; ".join(problems))

    def param_shapes(self):
        """Parameter names and shapes in Megatron's state-dict order (ModelBuilder.cpp)."""
        H, NH, NG, D, F_, Vp = self.H, self.NH, self.NG, self.D, self.F, self.Vp
        out = [("embedding.word_embeddings.weight", (Vp, H))]
        if not self.rope:
            out.append(("embedding.position_embeddings.weight", (self.S_max, H)))
        for l in range(self.L):
            p = f"decoder.layers.{l}."
            out.append((p + "input_layernorm.weight", (H,)))
            if not self.rms:
                out.append((p + "input_layernorm.bias", (H,)))
            for n, rows in (("q", NH * D), ("k", NG * D), ("v", NG * D)):
                out.append((p + f"self_attention.linear_{n}.weight", (rows, H)))
            if self.bias:
                for n, rows in (("q", NH * D), ("k", NG * D), ("v", NG * D)):
                    out.append((p + f"self_attention.linear_{n}.bias", (rows,)))
            out.append((p + "self_attention.linear_proj.weight", (H, NH * D)))
            if self.bias:
                out.append((p + "self_attention.linear_proj.bias", (H,)))
            out.append((p + "pre_mlp_layernorm.weight", (H,)))
            if not self.rms:
                out.append((p + "pre_mlp_layernorm.bias", (H,)))
            fc1 = 2 * F_ if self.swiglu else F_
            out.append((p + "mlp.linear_fc1.weight", (fc1, H)))
            if self.bias:
                out.append((p + "mlp.linear_fc1.bias", (fc1,)))
            out.append((p + "mlp.linear_fc2.weight", (H, F_)))
            if self.bias:
                out.append((p + "mlp.linear_fc2.bias", (H,)))
        out.append(("decoder.final_layernorm.weight", (H,)))
        if not self.rms:
            out.append(("decoder.final_layernorm.bias", (H,)))
        if self.untied:
            out.append(("output_layer.weight", (Vp, H)))
        return out


def zero_gradient(name):
    # The key bias adds the same amount to every score of a query's softmax row, so its gradient is
    # zero in exact arithmetic; in floating point it is rounding noise, which Adam normalises into
    # steps of implementation-dependent size. Compared for the record, not checked.
    return name.endswith("self_attention.linear_k.bias")


def no_weight_decay(name):
    # ModelBuilder marks norm weights/biases and linear biases model.no_weight_decay (Megatron).
    return "layernorm" in name or name.endswith(".bias")


def rope_tables(cfg, dtype):
    """cos/sin [S, rd/2] for positions 0..S-1. Angles in double, rounded once (as the kernel does)."""
    rd = int(cfg.D * cfg.rotary_percent)
    half = rd // 2
    inv_freq = torch.tensor([cfg.rotary_base ** (-2.0 * i / rd) for i in range(half)],
                            dtype=torch.float64)
    pos = torch.arange(cfg.S, dtype=torch.float64)
    ang = pos[:, None] * inv_freq[None, :]
    return rd, torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, rd, cos, sin):
    """x [B, S, N, D]; rotate-half on the first rd channels."""
    half = rd // 2
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    a, b, rest = x[..., :half], x[..., half:rd], x[..., rd:]
    return torch.cat([a * c - b * s, b * c + a * s, rest], dim=-1)


def rms_norm(x, w, eps):
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * rstd * w


def norm(cfg, x, P, prefix):
    if cfg.rms:
        return rms_norm(x, P[prefix + ".weight"], cfg.eps)
    return F.layer_norm(x, (cfg.H,), P[prefix + ".weight"], P[prefix + ".bias"], cfg.eps)


def linear(cfg, x, P, prefix):
    return F.linear(x, P[prefix + ".weight"], P.get(prefix + ".bias") if cfg.bias else None)


def forward_loss_sum(cfg, P, tokens, labels, mask, rope):
    """Sum over tokens of mask * CE, and sum(mask). tokens, labels [B, S] int64; mask [B, S]."""
    B, S = tokens.shape
    NH, NG, D = cfg.NH, cfg.NG, cfg.D
    x = F.embedding(tokens, P["embedding.word_embeddings.weight"])
    if not cfg.rope:
        pos = torch.arange(S)[None, :].expand(B, S)
        x = x + F.embedding(pos, P["embedding.position_embeddings.weight"])
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    for l in range(cfg.L):
        p = f"decoder.layers.{l}."
        h = norm(cfg, x, P, p + "input_layernorm")
        q = linear(cfg, h, P, p + "self_attention.linear_q").view(B, S, NH, D)
        k = linear(cfg, h, P, p + "self_attention.linear_k").view(B, S, NG, D)
        v = linear(cfg, h, P, p + "self_attention.linear_v").view(B, S, NG, D)
        if cfg.rope:
            q = apply_rope(q, *rope)
            k = apply_rope(k, *rope)
        # GQA: query head h reads kv head h // (NH / NG).
        rep = NH // NG
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        qh, kh, vh = (t.permute(0, 2, 1, 3) for t in (q, k, v))  # [B, NH, S, D]
        scores = torch.matmul(qh, kh.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        o = torch.matmul(probs, vh).permute(0, 2, 1, 3).reshape(B, S, NH * D)
        x = x + linear(cfg, o, P, p + "self_attention.linear_proj")
        h2 = norm(cfg, x, P, p + "pre_mlp_layernorm")
        u = linear(cfg, h2, P, p + "mlp.linear_fc1")
        if cfg.swiglu:
            a, b = u.chunk(2, dim=-1)
            g = F.silu(a) * b
        else:
            g = F.gelu(u, approximate="tanh" if cfg.openai_gelu else "none")
        x = x + linear(cfg, g, P, p + "mlp.linear_fc2")
    hf = norm(cfg, x, P, "decoder.final_layernorm")
    wout = P["output_layer.weight"] if cfg.untied else P["embedding.word_embeddings.weight"]
    logits = F.linear(hf, wout).reshape(B * S, cfg.Vp)
    if cfg.Vp != cfg.V:
        logits = logits.masked_fill(torch.arange(cfg.Vp)[None, :] >= cfg.V, float("-inf"))
    ce = F.cross_entropy(logits, labels.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    return (m * ce).sum(), m.sum()


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

def megatron_lr(rd, iteration, gbs):
    """The lr Megatron's OptimizerParamScheduler gives iteration `iteration` (1-based) for an
    iteration-based run (plan.json runtime_defaults), or None when the schedule is not modelled."""
    def num(key, default="0"):
        return float(rd.get(key, default) or default)
    if num("lr_warmup_samples") or num("lr_decay_samples") or num("train_samples"):
        return None
    style = rd.get("lr_decay_style", "linear")
    if style not in ("constant", "linear", "cosine"):
        return None
    max_lr, min_lr = num("lr"), num("min_lr")
    init_lr = num("lr_warmup_init")
    warmup = num("lr_warmup_iters") * gbs
    decay = (num("lr_decay_iters") or num("train_iters")) * gbs
    steps = (iteration - 1) * gbs  # the scheduler steps after the optimizer
    if warmup > 0 and steps <= warmup:
        return init_lr + (max_lr - init_lr) * steps / warmup
    if style == "constant":
        return max_lr
    if steps > decay:
        return min_lr
    ratio = (steps - warmup) / (decay - warmup)
    coeff = 1.0 - ratio if style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return min_lr + coeff * (max_lr - min_lr)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True, help="plan directory (plan.json)")
    ap.add_argument("--dump", required=True, help="trainrun --dump-dir directory")
    ap.add_argument("--iters", type=int, default=0, help="iterations to replay (0: all dumped)")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--check-lr-schedule", action="store_true",
                    help="also check the lr column of losses.txt against Megatron's schedule "
                         "computed from plan.json runtime_defaults (only when trainrun was not "
                         "given other --lr* flags)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)

    try:
        with open(os.path.join(args.plan, "plan.json")) as f:
            plan = json.load(f)
        cfg = Config(plan)
        init = read_safetensors(os.path.join(args.dump, "initial_weights.safetensors"))
        final = read_safetensors(os.path.join(args.dump, "final_weights.safetensors"))
        losses = read_losses(os.path.join(args.dump, "losses.txt"))
        batches = read_batches(os.path.join(args.dump, "batches.bin"), cfg.gbs, cfg.S)
    except (OSError, ValueError, KeyError) as e:
        print(f"torch_reference: error: {e}", file=sys.stderr)
        return 2

    iters = args.iters or len(losses)
    if iters > len(losses) or iters > batches.shape[0]:
        print(f"torch_reference: error: --iters {iters} but the dump has {len(losses)} losses and "
              f"{batches.shape[0]} batches", file=sys.stderr)
        return 2
    check_weights = iters == len(losses)
    if not check_weights:
        print(f"note: replaying {iters} of {len(losses)} dumped iterations: final_weights.safetensors "
              f"is after {len(losses)}, so the weights are not compared")

    expected = cfg.param_shapes()
    names = [n for n, _ in expected]
    bad = []
    if set(names) != set(init):
        bad.append(f"parameter names differ: missing {sorted(set(names) - set(init))}, "
                   f"extra {sorted(set(init) - set(names))}")
    for n, shape in expected:
        if n in init and tuple(init[n].shape) != tuple(shape):
            bad.append(f"{n}: shape {tuple(init[n].shape)}, expected {tuple(shape)}")
    if bad:
        print("torch_reference: error: the dumped weights do not match plan.json:\n  " +
              "\n  ".join(bad), file=sys.stderr)
        return 2

    dtype = init[names[0]].dtype
    print(f"model: {cfg.family}, {cfg.L} layers, hidden {cfg.H}, ffn {cfg.F}, heads {cfg.NH}, "
          f"groups {cfg.NG}, head dim {cfg.D}, vocab {cfg.V} (padded {cfg.Vp}), seq {cfg.S}; "
          f"global batch {cfg.gbs}; {sum(init[n].numel() for n in names)} parameters, {dtype}")
    print(f"optimizer: AdamW betas ({cfg.beta1}, {cfg.beta2}) eps {cfg.adam_eps} weight decay "
          f"{cfg.weight_decay}, clip_grad {cfg.clip_grad}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)")

    P = {n: torch.nn.Parameter(init[n].clone()) for n in names}
    groups = [
        {"params": [P[n] for n in names if not no_weight_decay(n)], "weight_decay": cfg.weight_decay},
        {"params": [P[n] for n in names if no_weight_decay(n)], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    opt = torch.optim.AdamW(groups, lr=0.0, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps,
                            foreach=False)
    rope = rope_tables(cfg, dtype) if cfg.rope else None
    params = [P[n] for n in names]

    ok = True
    worst_loss = worst_norm = 0.0
    print()
    print(f"{'iter':>4} {'lr':>11} {'trainc loss':>16} {'torch loss':>16} {'rel diff':>9}   "
          f"{'trainc gnorm':>13} {'torch gnorm':>13} {'rel diff':>9}")
    for it in range(iters):
        it_no, ref_loss, ref_norm, lr = losses[it]
        sample = batches[it]
        tokens, labels = sample[:, :cfg.S], sample[:, 1:]
        mask = torch.ones(tokens.shape, dtype=dtype)
        opt.zero_grad(set_to_none=True)
        # One forward per microbatch, as trainc runs them; gradients of loss_sum accumulate and are
        # divided by the global token count (calculate_per_token_loss).
        loss_sum, ntok = 0.0, 0.0
        for m in range(cfg.gbs // cfg.mbs):
            sl = slice(m * cfg.mbs, (m + 1) * cfg.mbs)
            ls, nt = forward_loss_sum(cfg, P, tokens[sl], labels[sl], mask[sl], rope)
            ls.backward()
            loss_sum += float(ls.detach().double())
            ntok += float(nt)
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.grad.div_(ntok)
        loss = loss_sum / ntok
        if cfg.clip_grad > 0:
            gnorm = float(torch.nn.utils.clip_grad_norm_(params, cfg.clip_grad))
        else:
            gnorm = float(torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()

        dl, dn = rel(loss, ref_loss), rel(gnorm, ref_norm)
        lr_flag = ""
        if args.check_lr_schedule:
            want = megatron_lr(plan.get("runtime_defaults", {}), it_no, cfg.gbs)
            if want is None:
                lr_flag = "  (lr schedule not modelled)"
            elif abs(lr - want) > args.rtol * abs(want) + 1e-30:
                ok = False
                lr_flag = f"  <-- LR MISMATCH: Megatron's schedule gives {want:.6e}"
        worst_loss, worst_norm = max(worst_loss, dl), max(worst_norm, dn)
        flag = ""
        if not (dl <= args.rtol) or not (dn <= args.rtol):
            ok = False
            flag = "  <-- MISMATCH"
        print(f"{it_no:>4} {lr:>11.4e} {ref_loss:>16.9f} {loss:>16.9f} {dl:>9.2e}   "
              f"{ref_norm:>13.7f} {gnorm:>13.7f} {dn:>9.2e}{flag}{lr_flag}")

    if not check_weights:
        print()
        print(f"max relative loss difference:      {worst_loss:.3e}")
        print(f"max relative grad-norm difference: {worst_norm:.3e}")
        print(f"rtol {args.rtol:g}: {'PASS' if ok else 'FAIL'} (weights not compared)")
        return 0 if ok else 1

    print()
    print(f"{'parameter':<52} {'numel':>9} {'||w||':>11} {'rel L2 diff':>11} {'moved':>11}")
    worst_w = 0.0
    for n in names:
        ref = final[n].to(dtype) if n in final else None
        if ref is None or tuple(ref.shape) != tuple(P[n].shape):
            print(f"{n:<52} missing or misshapen in final_weights.safetensors  <-- MISMATCH")
            ok = False
            continue
        mine = P[n].detach()
        # How far the weights moved, for scale: relative L2 of (final - initial).
        moved = float((ref.double() - init[n].double()).norm() / max(float(ref.double().norm()), 1e-30))
        d = float((mine.double() - ref.double()).norm() / max(float(mine.double().norm()), 1e-30))
        flag = ""
        if zero_gradient(n):
            flag = f"  (zero gradient in exact arithmetic: not checked; max |diff| " \
                   f"{float((mine.double() - ref.double()).abs().max()):.1e})"
        else:
            worst_w = max(worst_w, d)
            if not (d <= args.rtol):
                ok = False
                flag = "  <-- MISMATCH"
        print(f"{n:<52} {mine.numel():>9} {float(mine.norm()):>11.5f} {d:>11.2e} {moved:>11.2e}{flag}")

    print()
    print(f"max relative loss difference:      {worst_loss:.3e}")
    print(f"max relative grad-norm difference: {worst_norm:.3e}")
    print(f"max relative L2 weight difference: {worst_w:.3e}  (after {iters} iterations)")
    print(f"rtol {args.rtol:g}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
