#!/usr/bin/env python3
"""Training throughput of a trainc plan's model in PyTorch eager on the CPU.

Builds the model described by PLAN/plan.json (the same shapes trainc compiled): Llama style
(RMSNorm, RoPE, GQA, SwiGLU, no biases, untied output layer) or GPT style (LayerNorm, learned
positions, biases, GELU, output layer tied to the word embeddings), and trains it like trainrun
does: per iteration,
global_batch_size / micro_batch_size microbatches of random tokens (forward + backward, gradients
accumulated), per-token loss scaling, global grad-norm clipping and torch.optim.AdamW. Times every
iteration and prints tokens per second over the iterations after the warm-up:

  torch tokens per second: 1234.5

It also prints torch.__config__.show(), the BLAS/LAPACK/oneDNN shared objects the process mapped
after the first iteration (which BLAS ran the fp32 matmuls: Debian's torch calls the system
libblas.so.3) and a line `torch blas: reference` or `torch blas: optimised (...)`;
bench/train_throughput.sh prints no ratio when it is `reference`.

Run it with the same thread count as trainc (OMP_NUM_THREADS / --threads) for a fair comparison.
bench/train_throughput.sh runs both.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F


def as_bool(s):
    return str(s).lower() in ("true", "1", "yes")


class RMSNorm(torch.nn.Module):
    def __init__(self, h, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Layer(torch.nn.Module):
    def __init__(self, c, std, out_std):
        super().__init__()
        H, NH, NG, D, Fd = c["H"], c["NH"], c["NG"], c["D"], c["F"]
        self.NH, self.NG, self.D, self.llama, self.tanh = NH, NG, D, c["llama"], c["gelu_tanh"]
        bias = c["bias"]
        Norm = (lambda h: RMSNorm(h, c["eps"])) if c["llama"] else \
            (lambda h: torch.nn.LayerNorm(h, eps=c["eps"]))
        self.input_layernorm = Norm(H)
        self.linear_q = torch.nn.Linear(H, NH * D, bias=bias)
        self.linear_k = torch.nn.Linear(H, NG * D, bias=bias)
        self.linear_v = torch.nn.Linear(H, NG * D, bias=bias)
        self.linear_proj = torch.nn.Linear(NH * D, H, bias=bias)
        self.pre_mlp_layernorm = Norm(H)
        self.linear_fc1 = torch.nn.Linear(H, 2 * Fd if c["llama"] else Fd, bias=bias)
        self.linear_fc2 = torch.nn.Linear(Fd, H, bias=bias)
        for m, s in ((self.linear_q, std), (self.linear_k, std), (self.linear_v, std),
                     (self.linear_proj, out_std), (self.linear_fc1, std), (self.linear_fc2, out_std)):
            torch.nn.init.normal_(m.weight, 0.0, s)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)

    def forward(self, x, cos, sin, causal):
        B, S, _ = x.shape
        NH, NG, D = self.NH, self.NG, self.D
        h = self.input_layernorm(x)
        q = self.linear_q(h).view(B, S, NH, D)
        k = self.linear_k(h).view(B, S, NG, D)
        v = self.linear_v(h).view(B, S, NG, D)
        if self.llama:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = NH // NG
        if rep > 1:
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, NH, S, D]
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        o = torch.matmul(probs, v).transpose(1, 2).reshape(B, S, NH * D)
        x = x + self.linear_proj(o)
        h = self.linear_fc1(self.pre_mlp_layernorm(x))
        if self.llama:
            a, b = h.chunk(2, dim=-1)
            h = F.silu(a) * b
        else:
            h = F.gelu(h, approximate="tanh" if self.tanh else "none")
        return x + self.linear_fc2(h)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        std = c["std"]
        out_std = std / math.sqrt(2.0 * c["L"])
        self.word_embeddings = torch.nn.Embedding(c["Vp"], c["H"])
        torch.nn.init.normal_(self.word_embeddings.weight, 0.0, std)
        self.position_embeddings = None
        if not c["llama"]:
            self.position_embeddings = torch.nn.Embedding(c["P"], c["H"])
            torch.nn.init.normal_(self.position_embeddings.weight, 0.0, std)
        self.layers = torch.nn.ModuleList(Layer(c, std, out_std) for _ in range(c["L"]))
        self.final_layernorm = RMSNorm(c["H"], c["eps"]) if c["llama"] else \
            torch.nn.LayerNorm(c["H"], eps=c["eps"])
        self.output_layer = None
        if c["untie"]:
            self.output_layer = torch.nn.Linear(c["H"], c["Vp"], bias=False)
            torch.nn.init.normal_(self.output_layer.weight, 0.0, std)
        S, D = c["S"], c["D"]
        inv = torch.tensor([c["base"] ** (-2.0 * i / D) for i in range(D // 2)], dtype=torch.float64)
        ang = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cos(ang).float()[None, :, None, :], persistent=False)
        self.register_buffer("sin", torch.sin(ang).float()[None, :, None, :], persistent=False)
        self.register_buffer("causal", torch.ones(S, S, dtype=torch.bool).triu(1), persistent=False)
        self.V = c["V"]

    def forward(self, tokens, labels):
        x = self.word_embeddings(tokens)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings.weight[None, :tokens.shape[1]]
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.causal)
        x = self.final_layernorm(x)
        if self.output_layer is not None:
            logits = self.output_layer(x)
        else:
            logits = torch.matmul(x, self.word_embeddings.weight.t())
        logits = logits.reshape(-1, logits.shape[-1])
        if logits.shape[-1] != self.V:
            logits = logits[:, :self.V]
        return F.cross_entropy(logits, labels.reshape(-1), reduction="sum")


def loaded_blas():
    """The BLAS/LAPACK shared objects this process mapped (to tell reference BLAS from OpenBLAS)."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                base = os.path.basename(path)
                if any(k in base for k in ("blas", "mkl", "blis", "dnnl")):
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    return sorted(libs)


def blas_verdict(libs):
    """'reference' when the BLAS that torch mapped is the netlib reference one (Debian's libblas3,
    /usr/lib/<triplet>/blas/), or no BLAS at all was found; else 'optimised (<names>)'."""
    blas = [l for l in libs if "blas" in os.path.basename(l) or "mkl" in os.path.basename(l)
            or "blis" in os.path.basename(l)]
    good = [l for l in blas if any(k in l for k in ("openblas", "mkl", "blis"))]
    if not good:
        return "reference"
    return "optimised (" + ", ".join(sorted({os.path.basename(l) for l in good})) + ")"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True, help="trainc plan directory (plan.json)")
    ap.add_argument("--iters", type=int, default=20, help="timed + warm-up iterations")
    ap.add_argument("--warmup", type=int, default=5, help="leading iterations not timed")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
                    or os.cpu_count(), help="torch.set_num_threads (default $OMP_NUM_THREADS)")
    ap.add_argument("--clip-grad", type=float, default=None, help="default: plan.json clip_grad")
    args = ap.parse_args()
    if args.iters <= args.warmup:
        ap.error("--iters must exceed --warmup")

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    with open(os.path.join(args.plan, "plan.json")) as f:
        plan = json.load(f)
    m, t = plan["model"], plan["training"]
    llama = m["position_embedding_type"] == "rope"
    if llama and (m["normalization"] != "RMSNorm" or not as_bool(m["swiglu"]) or
                  as_bool(m["add_bias_linear"]) or float(m["rotary_percent"]) != 1):
        print("torch_bench: a rope plan must be Llama style (RMSNorm, SwiGLU, no bias)",
              file=sys.stderr)
        return 2
    if not llama and (m["normalization"] != "LayerNorm" or as_bool(m["swiglu"]) or
                      m["position_embedding_type"] != "learned_absolute"):
        print("torch_bench: a non-rope plan must be GPT style (LayerNorm, GELU, learned "
              "positions)", file=sys.stderr)
        return 2
    if float(m["attention_dropout"]) != 0 or float(m["hidden_dropout"]) != 0:
        print("torch_bench: compile the plan without dropout (--attention-dropout 0 "
              "--hidden-dropout 0)", file=sys.stderr)
        return 2
    NH = int(m["num_attention_heads"])
    NG = int(m["num_query_groups"]) if as_bool(m["group_query_attention"]) else NH
    c = dict(L=int(m["num_layers"]), H=int(m["hidden_size"]), NH=NH, NG=NG or NH,
             D=int(m["kv_channels"]), F=int(m["ffn_hidden_size"]), V=int(m["vocab_size"]),
             Vp=int(m["padded_vocab_size"]), S=int(m["seq_length"]), eps=float(m["norm_epsilon"]),
             base=float(m["rotary_base"]), std=float(m["init_method_std"]), llama=llama,
             bias=as_bool(m["add_bias_linear"]), gelu_tanh=as_bool(m["gelu_tanh"]),
             untie=as_bool(m["untie_embeddings_and_output_weights"]),
             P=int(m["max_position_embeddings"]))
    gbs, mbs = int(t["global_batch_size"]), int(t["micro_batch_size"])
    clip = float(t["clip_grad"]) if args.clip_grad is None else args.clip_grad
    lr = float(plan.get("runtime_defaults", {}).get("lr", "1e-4") or 1e-4)

    model = Model(c)
    params = list(model.parameters())
    nparams = sum(p.numel() for p in params)
    # Megatron: no weight decay on biases and norm weights.
    no_wd = lambda n: "layernorm" in n or n.endswith(".bias")
    decay = [p for n, p in model.named_parameters() if not no_wd(n)]
    no_decay = [p for n, p in model.named_parameters() if no_wd(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(t["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr,
                            betas=(float(t["adam_beta1"]), float(t["adam_beta2"])),
                            eps=float(t["adam_eps"]))
    print(torch.__config__.show().rstrip())
    print(f"torch {torch.__version__}: {torch.get_num_threads()} threads; "
          f"{'Llama' if llama else 'GPT'} {c['L']} layers, "
          f"hidden {c['H']}, ffn {c['F']}, heads {NH}/{NG}, vocab {c['Vp']}, seq {c['S']}, "
          f"{nparams} parameters; micro batch {mbs}, global batch {gbs}")
    g = torch.Generator().manual_seed(1234)
    times = []
    for it in range(1, args.iters + 1):
        batch = torch.randint(0, c["V"], (gbs, c["S"] + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for mb in range(gbs // mbs):
            s = batch[mb * mbs:(mb + 1) * mbs]
            loss = model(s[:, :-1], s[:, 1:])
            loss.backward()
            total += float(loss.detach())
        ntok = gbs * c["S"]
        for p in params:
            p.grad.div_(ntok)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        print(f"iteration {it:3d}/{args.iters} | loss {total / ntok:.4f} | {dt * 1e3:.1f} ms | "
              f"tokens per second: {ntok / dt:.0f}{' (warm-up)' if it <= args.warmup else ''}",
              flush=True)
    timed = times[args.warmup:]
    tps = gbs * c["S"] * len(timed) / sum(timed)
    libs = loaded_blas()
    print(f"BLAS/oneDNN libraries loaded: {', '.join(libs) or 'none found'}")
    print(f"torch blas: {blas_verdict(libs)}")
    print(f"torch tokens per second: {tps:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
