#!/usr/bin/env bash
# Single-rank fp32 training throughput: trainc (trainrun) next to a fairly configured PyTorch eager
# on the CPU, same model, same batch, same machine, same thread count, for a Llama and a GPT shape
# at ~10M and ~100M parameters, measured in one run (issue 17 items 1 and 5). Per case it prints
# tokens/s of both and their ratio, the iteration's FLOP/s over the measured GEMM FLOP/s (an
# MFU-like figure), the share of the iteration's kernel time per kernel class and the rate of
# its own GEMMs overall and per problem size next to each size alone (from trainrun --trace and
# bench_gemm); once, the GEMM rate (bench_gemm) and the initialisation time per 100M parameters
# (bench_kernels) and the machine's f32 FMA peak (bench_gemm --peak) with, per case, the highest
# ratio the plan's FLOPs allow at that peak; at the end, every reference GEMM measurement of the run
# and each iteration's share against their median and best. With LLMC_SRC, also llm.c's CPU
# trainer on each GPT case's model.
#
# usage: bench/train_throughput.sh [TRAINC [TRAINRUN [WORK_DIR]]]
#   defaults: build/tools/trainc, build/tools/trainrun, /tmp/trainc-throughput
# environment:
#   THREADS       OpenMP/oneDNN/torch/OpenBLAS threads for both (default: $OMP_NUM_THREADS, else
#                 nproc). One process at a time runs, so nothing is oversubscribed by the bench.
#   CASES         cases to run (default: "llama-10m gpt-10m llama-100m gpt2-124m llama-100m-ga
#                 gpt2-124m-ga"):
#                   llama-10m   preset llama-10m (6 x 384, ffn 1024, 6/2 heads, vocab 256), seq 256,
#                               micro batch 4, global batch GBS_SMALL (default 4): 9.6M parameters
#                   gpt-10m     GPT (LayerNorm, learned positions, biases, GELU, tied), 6 x 384,
#                               ffn 1536, 6 heads, vocab 256, seq 256, micro 4, global GBS_SMALL:
#                               10.8M
#                   llama-100m  12 x 768, ffn 2048, 12/4 heads, vocab 32000 (untied), seq 256,
#                               micro 1, global 1: 125M
#                   gpt2-124m   GPT-2 124M (12 x 768, 12 heads, vocab 50257, positions 1024) at
#                               llm.c's CPU shape: seq 64, micro batch 4 (B = 4, T = 64): 124M
#                   llama-100m-ga  llama-100m as Megatron trains it (docs/kernels.md, "Benchmark
#                               setting of the ~100M cases"): micro batch 4, global batch 16,
#                               4 microbatches accumulated per step, 4096 tokens per step
#                   gpt2-124m-ga   gpt2-124m at GPT-2's context, seq 1024, micro batch 1, global
#                               batch 4: 4 microbatches accumulated, 4096 tokens per step
#   ITERS         timed iterations + 1 per small case (default 3), ITERS_LARGE for the ~100M cases
#                 (default 2): trainc and PyTorch each run ITERS + 1 iterations, the first two
#                 warm-up (log interval 1, the rest averaged; one warm-up before 2026-12-04). The
#                 defaults fit the shared, loaded 2-core machine (the whole run ~10 min at load 12)
#   TORCH_PYTHON  python with torch (default /usr/bin/python3: Debian's python3-torch, installed
#                 with the OpenMP OpenBLAS by scripts/setup.sh --torch). Debian's torch calls the
#                 system libblas.so.3 for every fp32 matmul; when that is the reference (netlib)
#                 BLAS the script prints PyTorch's figures but no ratio.
#   TORCH_BLAS_DIR  a directory with another libblas.so.3 for the PyTorch run (LD_LIBRARY_PATH)
#   BENCH_DIR     bench_gemm and bench_kernels (default: build/bench; built by `ninja bench`)
#   LLMC_SRC      llm.c's source tree (e.g. a `git archive` of github.com/karpathy/llm.c): the
#                 script copies it to WORK_DIR/llmc/src, builds train_gpt2 there (make train_gpt2,
#                 OpenMP), writes its files with bench/llmc_prepare.py (random GPT-2-style weights
#                 of each GPT case's model, random tokens: no downloads) and runs it with THREADS
#                 threads at its own B and T (4 x 64), next to trainc's plan of the same model at
#                 that B and T, run before and after it; nothing of llm.c is committed here
#   LLMC_STEPS    llm.c's timed steps after its warm-up step 0 (default 4, at most 19: it samples
#                 text at step 20); trainc runs as many after its warm-up iteration
#   LLMC_TIMEOUT  seconds llm.c may take to reach step LLMC_STEPS (default 1800)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINC=${1:-$ROOT/build/tools/trainc}
TRAINRUN=${2:-$ROOT/build/tools/trainrun}
WORK=${3:-/tmp/trainc-throughput}
THREADS=${THREADS:-${OMP_NUM_THREADS:-$(nproc)}}
CASES=${CASES:-llama-10m gpt-10m llama-100m gpt2-124m llama-100m-ga gpt2-124m-ga}
ITERS=${ITERS:-3}
ITERS_LARGE=${ITERS_LARGE:-2}
GBS_SMALL=${GBS_SMALL:-4}
TORCH_PYTHON=${TORCH_PYTHON:-/usr/bin/python3}
BENCH_DIR=${BENCH_DIR:-$ROOT/build/bench}

export OMP_NUM_THREADS=$THREADS
export OPENBLAS_NUM_THREADS=$THREADS
export MKL_NUM_THREADS=$THREADS
# Waiting OpenMP threads sleep instead of spinning unless the caller says otherwise: on a shared
# 2-core machine spinning made trainc's iterations 2-4x slower (docs/kernels.md, "OMP_WAIT_POLICY");
# the same setting applies to PyTorch (libgomp as well).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "OMP_NUM_THREADS=$OMP_NUM_THREADS OMP_WAIT_POLICY=$OMP_WAIT_POLICY"
if (( ITERS < 2 || ITERS_LARGE < 2 )); then
  echo "ITERS and ITERS_LARGE must be >= 2: the first iteration is warm-up" >&2
  exit 2
fi

if [[ -n "${LLMC_DIR:-}" ]]; then
  echo "LLMC_DIR is replaced by LLMC_SRC (llm.c's source tree; the bench prepares its files)" >&2
  exit 2
fi
if [[ -n "${LLMC_SRC:-}" ]]; then
  LLMC_STEPS=${LLMC_STEPS:-4}
  LLMC_TIMEOUT=${LLMC_TIMEOUT:-1800}
  [[ -f "$LLMC_SRC/train_gpt2.c" ]] ||
    { echo "LLMC_SRC=$LLMC_SRC has no train_gpt2.c (expected llm.c's source tree)" >&2; exit 2; }
fi

rm -rf "$WORK"
mkdir -p "$WORK"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); threads $THREADS; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# The GEMM rate the MFU-like figure divides by: trainc's f32 matmul through the runtime at
# 4096 x 1024 x 4096 (bench_gemm's second line).
GEMM_GFLOPS=""
if [[ -x "$BENCH_DIR/bench_gemm" ]]; then
  "$BENCH_DIR/bench_gemm" >"$WORK/gemm.log" 2>&1 || true
  GEMM_GFLOPS=$(grep -o 'M=4096 K=1024 N=4096: runtime [0-9.]*' "$WORK/gemm.log" | awk '{print $NF}' | head -1)
fi
if [[ -n "$GEMM_GFLOPS" ]]; then
  echo "GEMM (f32, 4096x1024x4096, through the runtime): $GEMM_GFLOPS GFLOP/s"
else
  echo "GEMM rate: not measured ($BENCH_DIR/bench_gemm missing or failed: ninja -C build bench)"
fi
# The machine's f32 FMA peak (bench_gemm --peak, from each thread's CPU time): no f32 GEMM exceeds
# it, so neither does the rate of the plan's FLOPs (flops_per_iteration: the GEMMs' and
# attention's, whose backward recomputes the scores; blocks a --reset-attention-mask plan skips
# are still counted: none of the cases here) over trainc's iteration time. peak / (the plan's
# FLOPs over PyTorch's iteration time) is therefore the highest trainc/PyTorch ratio trainc can
# reach on this machine, even with every other kernel free. The same with the reference GEMM rate
# (4096x1024x4096 through the runtime, measured at the start) in place of the peak is the ratio
# if every FLOP ran at that rate (not a bound: other sizes may run faster).
PEAK_GFLOPS=""
if [[ -x "$BENCH_DIR/bench_gemm" ]]; then
  PEAK_GFLOPS=$("$BENCH_DIR/bench_gemm" --peak 2>/dev/null | grep -o 'peak [0-9.]* GFLOP/s' | awk '{print $2}') || true
fi
if [[ -n "$PEAK_GFLOPS" ]]; then
  printf 'f32 FMA peak (%s threads, bench_gemm --peak): %s GFLOP/s' "$THREADS" "$PEAK_GFLOPS"
  [[ -n "$GEMM_GFLOPS" ]] && awk -v g="$GEMM_GFLOPS" -v p="$PEAK_GFLOPS" 'BEGIN { printf "; the GEMM rate is %.0f%% of it", 100 * g / p }'
  echo
else
  echo "f32 FMA peak: not measured (bench_gemm --peak missing or no AVX2/AVX-512F): no ceilings"
fi
if [[ -x "$BENCH_DIR/bench_kernels" ]]; then
  "$BENCH_DIR/bench_kernels" init >"$WORK/init.log" 2>&1 || true
  awk '/per 100M parameters/ { printf "initialisation (f32 normal, 2048x2048, %s threads): %s s per 100M parameters (min), %s s (median); CPU time %s s per 100M\n", ENVIRON["OMP_NUM_THREADS"], $2, $5, $(NF-4) }' "$WORK/init.log"
fi

TORCH_OK=1
if ! "$TORCH_PYTHON" -c "import torch" >/dev/null 2>&1; then
  echo "'$TORCH_PYTHON' cannot import torch (scripts/setup.sh --torch): trainc figures only"
  TORCH_OK=0
fi
TORCH_ENV=(env)
[[ -n "${TORCH_BLAS_DIR:-}" ]] && TORCH_ENV=(env "LD_LIBRARY_PATH=$TORCH_BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

case_flags() {
  case "$1" in
    llama-10m) echo "--preset llama-10m --seq-length 256 --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size $GBS_SMALL" ;;
    gpt-10m) echo "--preset gpt2-small --num-layers 6 --hidden-size 384 --ffn-hidden-size 1536 --num-attention-heads 6 --vocab-size 256 --seq-length 256 --max-position-embeddings 256 --attention-dropout 0 --hidden-dropout 0 --micro-batch-size 4 --global-batch-size $GBS_SMALL" ;;
    llama-100m) echo "--preset llama-10m --num-layers 12 --hidden-size 768 --ffn-hidden-size 2048 --num-attention-heads 12 --num-query-groups 4 --vocab-size 32000 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 1 --global-batch-size 1" ;;
    gpt2-124m) echo "--preset gpt2-small --seq-length 64 --max-position-embeddings 1024 --attention-dropout 0 --hidden-dropout 0 --micro-batch-size 4 --global-batch-size 4" ;;
    llama-100m-ga) echo "--preset llama-10m --num-layers 12 --hidden-size 768 --ffn-hidden-size 2048 --num-attention-heads 12 --num-query-groups 4 --vocab-size 32000 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 16" ;;
    gpt2-124m-ga) echo "--preset gpt2-small --seq-length 1024 --max-position-embeddings 1024 --attention-dropout 0 --hidden-dropout 0 --micro-batch-size 1 --global-batch-size 4" ;;
    *) return 1 ;;
  esac
}

SUMMARY=()
declare -A ITER_RATE  # case -> the iteration's GFLOP/s
for CASE in $CASES; do
  FLAGS=$(case_flags "$CASE") || { echo "unknown case '$CASE'" >&2; exit 2; }
  N=$ITERS
  [[ "$CASE" == *100m* || "$CASE" == *124m* ]] && N=$ITERS_LARGE
  D="$WORK/$CASE"
  mkdir -p "$D"
  # shellcheck disable=SC2086
  "$TRAINC" compile $FLAGS --lr 1e-4 --train-iters "$((N + 1))" -o "$D/plan" >"$D/compile.log" 2>&1 ||
    { cat "$D/compile.log"; exit 1; }
  PARAMS=$(grep -o '"num_parameters": [0-9]*' "$D/plan/plan.json" | grep -o '[0-9]*$')
  echo "== $CASE: $PARAMS parameters; $FLAGS; $((N + 1)) iterations (the first two are warm-up); load $(cut -d' ' -f1 /proc/loadavg)"
  "$TRAINRUN" "$D/plan" -- --mock-data --log-interval 1 --eval-iters 0 --log-throughput \
    --trace "$D/trace" >"$D/trainrun.log" 2>&1 || { cat "$D/trainrun.log"; exit 1; }
  # Iterations 3..N+1: tokens/s is the harmonic mean of the per-iteration rates (equal token
  # counts).
  TRAINC_TPS=$(grep -o 'tokens per second: [0-9.]*' "$D/trainrun.log" | awk '{print $4}' |
    awk 'NR > 2 && $1 > 0 { n++; s += 1 / $1 } END { if (n) printf "%.1f", n / s }')
  TFLOPS=$(grep -o 'TFLOP/s/GPU): [0-9.]*' "$D/trainrun.log" | awk '{print $2}' |
    awk 'NR > 2 { n++; s += $1 } END { if (n) printf "%.4f", s / n }')
  [[ -n "$TRAINC_TPS" ]] || { echo "no 'tokens per second' after the second iteration in $D/trainrun.log" >&2; exit 1; }
  printf '  trainc          %10.1f tokens/s' "$TRAINC_TPS"
  # trainrun's TFLOP/s has one decimal: recompute the FLOP/s from the plan's count and the time.
  FLOPS=$(grep -o '"flops_per_iteration": [0-9.e+]*' "$D/plan/plan.json" | head -1 | awk '{print $2}')
  MS=$(grep -o 'elapsed time per iteration (ms): [0-9.]*' "$D/trainrun.log" | awk '{print $NF}' |
    awk 'NR > 2 { n++; s += $1 } END { if (n) printf "%.3f", s / n }')
  if [[ -n "$FLOPS" && -n "$MS" ]]; then
    ITER_GFLOPS=$(awk -v f="$FLOPS" -v ms="$MS" 'BEGIN { printf "%.1f", f / (ms / 1e3) / 1e9 }')
  else
    ITER_GFLOPS=$(awk -v t="${TFLOPS:-0}" 'BEGIN { printf "%.1f", t * 1e3 }')
  fi
  printf ', %s GFLOP/s' "$ITER_GFLOPS"
  ITER_RATE[$CASE]=$ITER_GFLOPS
  rm -f "$D/gemm_now"
  if [[ -n "$GEMM_GFLOPS" ]]; then
    awk -v a="$ITER_GFLOPS" -v g="$GEMM_GFLOPS" 'BEGIN { printf " = %.0f%% of the GEMM rate", 100 * a / g }'
  fi
  echo
  "$TORCH_PYTHON" - "$D/trace/rank0.trace.json" "${GEMM_GFLOPS:-0}" "$BENCH_DIR/bench_gemm" \
    "$ITER_GFLOPS" <<'PY'
import collections, json, os, re, subprocess, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["tid"] == 0]
ref = float(sys.argv[2])
functions = {e["args"]["function"] for e in ev}
def cls(k):
    if k == "matmul": return "GEMM"
    if k.startswith("attention"): return "attention"
    if k in ("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"): return "norms"
    if k.startswith("cross_entropy") or k.startswith("ce_"): return "loss"
    if k in ("adamw", "adamw_master", "sum_squares", "grad_norm_finalize"): return "optimizer"
    if k.startswith("embedding"): return "embedding"
    if k.startswith("gelu") or k.startswith("swiglu"): return "activation"
    if k.startswith("rope"): return "rope"
    return "other elementwise"
t = collections.Counter()
for e in ev:
    if e["name"] in functions or e["name"] in ("wait",):  # calls span their callees
        continue
    t[cls(e["name"])] += e["dur"]
total = sum(t.values()) or 1
print("  kernel time: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in t.most_common()))
# The iteration's own GEMMs (the trace's "gemm" / "gflop" args, docs/runtime.md): their rate
# overall and per problem size, against the reference GEMM rate (bench_gemm's 4096x1024x4096).
shapes = collections.defaultdict(lambda: [0, 0.0, 0.0])  # calls, us, gflop
for e in ev:
    if e["name"] == "matmul" and "gemm" in e["args"]:
        s = shapes[e["args"]["gemm"]]
        s[0] += 1; s[1] += e["dur"]; s[2] += e["args"]["gflop"]
us = sum(s[1] for s in shapes.values()); gf = sum(s[2] for s in shapes.values())
if us > 0:
    of = lambda r: f" = {100 * r / ref:.0f}% of the GEMM rate" if ref > 0 else ""
    rate = gf / (us * 1e-6)
    top = sorted(shapes.items(), key=lambda kv: -kv[1][1])[:8]
    # The same sizes alone (bench_gemm, caches flushed before each repetition), timed now: what
    # each GEMM reaches outside the iteration, against a reference measured in the same process.
    alone = {}
    if os.access(sys.argv[3], os.X_OK):
        spec = lambda k: re.sub(r"^1x", "", k).replace(" ", ":") + ":cold"
        out = subprocess.run([sys.argv[3]] + [spec(k) for k, _ in top if k.startswith("1x")],
                             capture_output=True, text=True).stdout
        rates = re.findall(r"^gemm f32 M=(\d+) K=(\d+) N=(\d+)([a-z_=1 ]*?) cold: ([0-9.]+) GFLOP/s,"
                           r" (\d+)% of the reference; mean of \d+: ([0-9.]+)", out, re.M)
        for m, k_, n_, flags, g, pct, mean in rates:
            key = f"1x{m}x{k_}x{n_}" + flags.replace("beta=1", "beta1")
            alone[key] = (float(g), int(pct), float(mean))
        m = re.search(r"\(reference\): ([0-9.]+)", out)
        if m:
            now = float(m.group(1))
            open(os.path.join(os.path.dirname(os.path.dirname(sys.argv[1])), "gemm_now"), "w").write(f"{now}\n")
            print(f"  reference GEMM rate now (bench_gemm, before the sizes alone): {now:.1f} GFLOP/s;"
                  f" the iteration's {float(sys.argv[4]):.1f} GFLOP/s = {100 * float(sys.argv[4]) / now:.0f}% of it")
    print(f"  GEMMs in the iteration: {rate:.1f} GFLOP/s{of(rate)}; by size (batch x M x K x N),"
          " largest time first, and the size alone:")
    for k, (n, d, g) in top:
        r = g / (d * 1e-6)
        a = (f"; alone {alone[k][0]:.1f} GFLOP/s best ({alone[k][1]}% of the reference now),"
             f" {alone[k][2]:.1f} mean") if k in alone else ""
        print(f"    {k:<34} {n:4d} calls {100 * d / us:5.1f}% of GEMM time {r:7.1f} GFLOP/s{of(r)}{a}")
PY
  if (( TORCH_OK )); then
    # The same iterations: two warm-up, N - 1 timed. PyTorch's second iteration ran up to 1.5x
    # slower than its later ones here (llama-10m 1090 ms against 640-800; llama-100m-ga 24-25.5 s
    # against 21.7-24); trainc's second was within its later ones' spread.
    "${TORCH_ENV[@]}" "$TORCH_PYTHON" "$ROOT/bench/torch_bench.py" --plan "$D/plan" \
      --iters "$((N + 1))" --warmup 2 --threads "$THREADS" >"$D/torch.log" 2>&1 ||
      { cat "$D/torch.log"; exit 1; }
    TORCH_TPS=$(grep -o '^torch tokens per second: [0-9.]*' "$D/torch.log" | awk '{print $5}')
    BLAS=$(grep -o '^torch blas: .*' "$D/torch.log" | cut -d' ' -f3-)
    printf '  PyTorch eager   %10.1f tokens/s (torch %s, BLAS: %s)\n' "$TORCH_TPS" \
      "$(grep -o '^torch [0-9][^:]*' "$D/torch.log" | head -1 | cut -d' ' -f2)" "$BLAS"
    if [[ "$BLAS" == reference* ]]; then
      echo "  no ratio: PyTorch ran on the reference BLAS (scripts/setup.sh --torch installs the OpenMP OpenBLAS)"
      SUMMARY+=("$CASE: trainc $TRAINC_TPS tokens/s, PyTorch on the reference BLAS: no ratio")
    else
      RATIO=$(awk -v a="$TRAINC_TPS" -v b="$TORCH_TPS" 'BEGIN { printf "%.2f", a / b }')
      echo "  ratio trainc/PyTorch: $RATIO"
      CEIL=""
      if [[ -n "$PEAK_GFLOPS" && -n "$FLOPS" && -n "$MS" ]]; then
        # The plan's FLOPs over PyTorch's iteration time: trainc's rate (from those FLOPs and its
        # mean iteration time) scaled by the tokens/s ratio. Not a rate of PyTorch's own FLOPs.
        # awk prints the case's line and the summary's suffix (nothing when the rates are 0).
        mapfile -t OUT < <(awk -v a="$ITER_GFLOPS" -v g="${GEMM_GFLOPS:-0}" -v p="$PEAK_GFLOPS" \
          -v t="$TRAINC_TPS" -v q="$TORCH_TPS" 'BEGIN {
          tf = a * q / t
          if (p <= 0 || tf <= 0) exit
          line = sprintf("against the FMA peak: trainc %.0f%%; the plan FLOPs over PyTorch iteration time %.1f GFLOP/s = %.0f%%; the highest ratio trainc can reach here: %.2f",
                         100 * a / p, tf, 100 * tf / p, p / tf)
          ceil = sprintf(" (at most %.2f at the FMA peak", p / tf)
          if (g > 0) {
            at = sprintf("%.2f if every FLOP ran at the reference GEMM rate", g / tf)
            line = line "; " at
            ceil = ceil "; " at
          }
          print line; print ceil ")" }')
        if (( ${#OUT[@]} == 2 )); then
          echo "  ${OUT[0]}"
          CEIL=${OUT[1]}
        fi
      fi
      SUMMARY+=("$CASE ($PARAMS parameters): trainc $TRAINC_TPS tokens/s, PyTorch $TORCH_TPS, ratio $RATIO$CEIL")
    fi
  else
    SUMMARY+=("$CASE ($PARAMS parameters): trainc $TRAINC_TPS tokens/s")
  fi
done

# llm.c's CPU trainer next to trainc on each GPT case (issue 17 item 5): the source tree LLMC_SRC
# is copied to $WORK/llmc/src and built there (make train_gpt2); per case, bench/llmc_prepare.py
# writes what train_gpt2 reads (random GPT-2-style weights of the case's model, random tokens, a
# tokenizer) into $WORK/llmc/CASE, and trainc runs at train_gpt2's own B and T (read from its
# main by llmc_prepare.py), before and after llm.c. train_gpt2 is not changed: it runs until it
# has printed step LLMC_STEPS and is then stopped; steps 1..LLMC_STEPS are timed (step 0 is its
# warm-up, which allocates the gradients and AdamW state; its validation and sampling run outside
# the timed region, and sampling starts only at step 20).
llmc_trainc_rate() {  # PLAN_DIR LOG TOKENS: trainc's tokens/s over the iterations after the first
  "$TRAINRUN" "$1" -- --mock-data --log-interval 1 --eval-iters 0 --log-throughput >"$2" 2>&1 ||
    { cat "$2" >&2; return 1; }
  # From the iteration times: the logged tokens/s is rounded to an integer.
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$2" | awk '{print $NF}' |
    awk -v bt="$3" 'NR > 1 { n++; ms += $1 } END { if (n) printf "%.1f", n * bt / (ms / 1e3) }'
}

llmc_run() {  # RUN_DIR STEPS: train_gpt2 in RUN_DIR until it prints "step STEPS:", then stopped
  local log=$1/train_gpt2.log waited=0 pid
  : >"$log"
  # Line-buffered: train_gpt2 does not flush its step lines.
  (cd "$1" && exec stdbuf -oL "$WORK/llmc/src/train_gpt2") >"$log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null' EXIT  # not left running when the script is interrupted
  until grep -q "^step $2: " "$log"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "train_gpt2 ended before step $2 (see $log):" >&2
      tail -5 "$log" >&2
      return 1
    fi
    if (( waited >= LLMC_TIMEOUT )); then
      kill "$pid"
      echo "train_gpt2 did not reach step $2 in LLMC_TIMEOUT=$LLMC_TIMEOUT s (see $log)" >&2
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  trap - EXIT
}

llmc_get() { grep "^llmc $2: " "$1" | cut -d' ' -f3; }  # PREPARE_LOG KEY

llmc_case() {  # CASE: trainc and llm.c on CASE's model at train_gpt2's B and T
  local case=$1 R="$WORK/llmc/$1" P FLAGS B T FLOPS PARAMS TPS_A TPS_B TPS LLMC_TPS STEP0 RATIO
  P="$R/prepare.log"
  mkdir -p "$R"
  "$TORCH_PYTHON" "$ROOT/bench/llmc_prepare.py" --llmc-src "$WORK/llmc/src" --print-facts \
    >"$P" 2>&1 || { cat "$P"; return 1; }
  B=$(llmc_get "$P" B) && T=$(llmc_get "$P" T) || return 1
  if (( LLMC_STEPS < 1 || LLMC_STEPS >= $(llmc_get "$P" sample_every) ||
        LLMC_STEPS > $(llmc_get "$P" last_step) )); then
    echo "LLMC_STEPS=$LLMC_STEPS must be in [1, $(( $(llmc_get "$P" sample_every) - 1 ))]: train_gpt2 samples text from step $(llmc_get "$P" sample_every) on" >&2
    return 1
  fi
  # trainc at B, T: micro batch B, one microbatch, LLMC_STEPS timed iterations after the warm-up.
  FLAGS=$(case_flags "$case") || return 1
  # shellcheck disable=SC2086
  "$TRAINC" compile $FLAGS --seq-length "$T" --micro-batch-size "$B" --global-batch-size "$B" \
    --lr 1e-4 --train-iters $((LLMC_STEPS + 1)) -o "$R/plan" >"$R/compile.log" 2>&1 ||
    { cat "$R/compile.log"; return 1; }
  # The checkpoint of the plan's model (llmc_prepare.py checks it is llm.c's architecture).
  "$TORCH_PYTHON" "$ROOT/bench/llmc_prepare.py" --llmc-src "$WORK/llmc/src" --out "$R/run" \
    --trainc-plan "$R/plan" >"$P" 2>&1 || { cat "$P"; return 1; }
  PARAMS=$(grep -o '"num_parameters": [0-9]*' "$R/plan/plan.json" | grep -o '[0-9]*$') || return 1
  FLOPS=$(grep -o '"flops_per_iteration": [0-9.e+]*' "$R/plan/plan.json" | head -1 | awk '{print $2}')
  echo "== llm.c vs trainc: $case's model at train_gpt2's B $B, T $T ($((B * T)) tokens per step); load $(cut -d' ' -f1 /proc/loadavg)"
  awk -v pt="$PARAMS" -v pl="$(llmc_get "$P" num_parameters)" -v ft="$FLOPS" -v bt=$((B * T)) \
    -v fl="$(llmc_get "$P" flops_per_token)" 'BEGIN {
      printf "  parameters: trainc %d, llm.c checkpoint %d; training FLOPs per token: trainc %.0f (plan), llm.c %.0f (its loops): %+.2f%%\n",
        pt, pl, ft / bt, fl, 100 * (ft / bt - fl) / fl }'
  TPS_A=$(llmc_trainc_rate "$R/plan" "$R/trainrun-before.log" $((B * T))) || return 1
  llmc_run "$R/run" "$LLMC_STEPS" || return 1
  TPS_B=$(llmc_trainc_rate "$R/plan" "$R/trainrun-after.log" $((B * T))) || return 1
  [[ -n "$TPS_A" && -n "$TPS_B" ]] || { echo "no trainc tokens/s in $R/trainrun-*.log" >&2; return 1; }
  if [[ "$(grep -m1 '^num_parameters: ' "$R/run/train_gpt2.log" | awk '{print $2}')" != \
        "$(llmc_get "$P" num_parameters)" ]]; then
    echo "train_gpt2's num_parameters differs from llmc_prepare.py's $(llmc_get "$P" num_parameters) ($R/run/train_gpt2.log)" >&2
    return 1
  fi
  # "step N: train loss X (took Y ms)", N = 1..LLMC_STEPS.
  LLMC_TPS=$(awk -v n="$LLMC_STEPS" -v bt=$((B * T)) '/^step [0-9]+: train loss/ {
      s = $2 + 0; if (s >= 1 && s <= n) { k++; ms += $7 } }
      END { if (k == n) printf "%.1f", k * bt / (ms / 1e3) }' "$R/run/train_gpt2.log")
  [[ -n "$LLMC_TPS" ]] || { echo "no step times 1..$LLMC_STEPS in $R/run/train_gpt2.log" >&2; return 1; }
  STEP0=$(awk '/^step 0: train loss/ { print $5 }' "$R/run/train_gpt2.log")
  TPS=$(awk -v a="$TPS_A" -v b="$TPS_B" 'BEGIN { printf "%.1f", (a + b) / 2 }')
  printf '  trainc          %10.1f tokens/s (before / after llm.c: %s, %s)\n' "$TPS" "$TPS_A" "$TPS_B"
  printf '  llm.c           %10.1f tokens/s (steps 1..%s; step-0 loss %s, ln(vocab) %s: random weights)\n' \
    "$LLMC_TPS" "$LLMC_STEPS" "$STEP0" "$(llmc_get "$P" expected_initial_loss)"
  RATIO=$(awk -v a="$TPS" -v b="$LLMC_TPS" 'BEGIN { printf "%.2f", a / b }')
  echo "  ratio trainc/llm.c: $RATIO (load $(cut -d' ' -f1 /proc/loadavg))"
  SUMMARY+=("$case's model at llm.c's B $B, T $T ($PARAMS parameters): trainc $TPS tokens/s, llm.c $LLMC_TPS, ratio $RATIO")
}

if [[ -n "${LLMC_SRC:-}" ]]; then
  rm -rf "$WORK/llmc"
  mkdir -p "$WORK/llmc"
  cp -r "$LLMC_SRC" "$WORK/llmc/src"
  make -C "$WORK/llmc/src" train_gpt2 >"$WORK/llmc/build.log" 2>&1 ||
    { tail -20 "$WORK/llmc/build.log"; exit 1; }
  echo "== llm.c from $LLMC_SRC, built in $WORK/llmc/src: $(grep -m1 -- '-o train_gpt2' "$WORK/llmc/build.log")"
  for CASE in $CASES; do
    [[ "$CASE" == gpt* ]] || continue
    # gpt2-124m-ga's model at llm.c's B 4, T 64 is gpt2-124m's: compared once.
    [[ "$CASE" == gpt2-124m-ga && " $CASES " == *" gpt2-124m "* ]] && continue
    llmc_case "$CASE" || exit 1
  done
fi

echo "== summary (threads $THREADS, load average at end: $(cut -d' ' -f1-3 /proc/loadavg))"
for s in "${SUMMARY[@]}"; do echo "  $s"; done
# The reference GEMM rate moves between measurements on a shared machine (183-212 GFLOP/s within
# one run here): every measurement of the run (the start's and each case's "now"), and each
# iteration's share against their median and their best.
REFS="$GEMM_GFLOPS"
for CASE in $CASES; do
  [[ -f "$WORK/$CASE/gemm_now" ]] && REFS+=" $(cat "$WORK/$CASE/gemm_now")"
done
if [[ -n "${REFS// /}" ]]; then
  read -r RMIN RMED RMAX NREF < <(echo "$REFS" | tr ' ' '\n' | grep . | sort -g |
    awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                              print v[1], m, v[NR], NR }')
  echo "  GEMM reference (f32 4096x1024x4096), $NREF measurements: min $RMIN, median $RMED, best $RMAX GFLOP/s"
  for CASE in $CASES; do
    [[ -n "${ITER_RATE[$CASE]:-}" ]] || continue
    awk -v c="$CASE" -v a="${ITER_RATE[$CASE]}" -v m="$RMED" -v b="$RMAX" \
      'BEGIN { printf "  %s: %.1f GFLOP/s = %.0f%% of the median reference, %.0f%% of the best\n", c, a, 100 * a / m, 100 * a / b }'
  done
fi
