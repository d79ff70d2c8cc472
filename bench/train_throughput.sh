#!/usr/bin/env bash
# Single-rank training throughput: trainc (trainrun) next to PyTorch eager on the CPU, same model,
# same batch, same machine, same thread count, measured in one run.
#
# usage: bench/train_throughput.sh [TRAINC [TRAINRUN [WORK_DIR]]]
#   defaults: build/tools/trainc, build/tools/trainrun, /tmp/trainc-throughput
# environment:
#   THREADS         OpenMP/oneDNN/torch threads for both (default: $OMP_NUM_THREADS, else nproc)
#   PRESET          model preset (default llama-10m: 6 layers, hidden 384, ffn 1024, 6 heads /
#                   2 groups, vocab 256; ~9.6M parameters)
#   SEQ MBS GBS     sequence length 256, micro batch 4, global batch 16
#   ITERS           iterations for both (default 20); LOG_INTERVAL 5 (the first interval is warm-up)
#   TORCH_ITERS     iterations of the PyTorch run (default ITERS)
#   TORCH_PYTHON    python with torch (default /usr/bin/python3, Debian's python3-torch)
#   TORCH_BLAS_DIR  a directory with another libblas.so.3 (e.g. OpenBLAS) for the PyTorch run:
#                   Debian's torch calls the system libblas.so.3 for every fp32 matmul, and the
#                   default alternative (libblas3) is the unoptimised single-threaded reference
#                   BLAS, which makes PyTorch ~15x slower than with OpenBLAS. OpenBLAS 0.3.21
#                   does not know AMD Zen 5 and picks its AVX2 (Haswell) kernels there;
#                   OPENBLAS_CORETYPE=SkylakeX selects the AVX-512 ones (passed through).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINC=${1:-$ROOT/build/tools/trainc}
TRAINRUN=${2:-$ROOT/build/tools/trainrun}
WORK=${3:-/tmp/trainc-throughput}
THREADS=${THREADS:-${OMP_NUM_THREADS:-$(nproc)}}
PRESET=${PRESET:-llama-10m}
SEQ=${SEQ:-256}
MBS=${MBS:-4}
GBS=${GBS:-16}
ITERS=${ITERS:-20}
LOG_INTERVAL=${LOG_INTERVAL:-5}
TORCH_ITERS=${TORCH_ITERS:-$ITERS}
TORCH_PYTHON=${TORCH_PYTHON:-/usr/bin/python3}

export OMP_NUM_THREADS=$THREADS
export OPENBLAS_NUM_THREADS=$THREADS
if (( ITERS <= LOG_INTERVAL )); then
  echo "ITERS ($ITERS) must exceed LOG_INTERVAL ($LOG_INTERVAL): the first interval is warm-up" >&2
  exit 2
fi

rm -rf "$WORK"
mkdir -p "$WORK"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); threads $THREADS; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

"$TRAINC" compile --preset "$PRESET" --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
  --micro-batch-size "$MBS" --global-batch-size "$GBS" --lr 1e-4 --train-iters "$ITERS" \
  -o "$WORK/plan" >"$WORK/compile.log" 2>&1 || { cat "$WORK/compile.log"; exit 1; }
PARAMS=$(grep -o '"num_parameters": [0-9]*' "$WORK/plan/plan.json" | grep -o '[0-9]*$')
echo "model: $PRESET, $PARAMS parameters, seq $SEQ, micro batch $MBS, global batch $GBS ($((GBS * SEQ)) tokens per iteration)"

echo "== trainc: $ITERS iterations (log interval $LOG_INTERVAL; the first interval is warm-up)"
"$TRAINRUN" "$WORK/plan" -- --mock-data --log-interval "$LOG_INTERVAL" >"$WORK/trainrun.log" 2>&1 ||
  { cat "$WORK/trainrun.log"; exit 1; }
grep -o 'iteration .*tokens per second: [0-9.]*' "$WORK/trainrun.log" | sed 's/^/  /'
# Intervals have the same number of iterations: the mean rate is the harmonic mean of the rates.
TRAINC_TPS=$(grep -o 'tokens per second: [0-9.]*' "$WORK/trainrun.log" | awk '{print $4}' |
  awk 'NR > 1 && $1 > 0 { n++; s += 1 / $1 } END { if (n) printf "%.1f", n / s }')
[[ -n "$TRAINC_TPS" ]] || { echo "no 'tokens per second' after the first interval in $WORK/trainrun.log" >&2; exit 1; }

echo "== PyTorch eager: $TORCH_ITERS iterations (the first $LOG_INTERVAL are warm-up)"
if ! "$TORCH_PYTHON" -c "import torch" >/dev/null 2>&1; then
  echo "'$TORCH_PYTHON' cannot import torch: no PyTorch comparison" >&2
  echo "trainc tokens/s: $TRAINC_TPS"
  exit 0
fi
TORCH_ENV=()
[[ -n "${TORCH_BLAS_DIR:-}" ]] && TORCH_ENV=(env "LD_LIBRARY_PATH=$TORCH_BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
"${TORCH_ENV[@]}" "$TORCH_PYTHON" "$ROOT/bench/torch_bench.py" --plan "$WORK/plan" \
  --iters "$TORCH_ITERS" --warmup "$LOG_INTERVAL" --threads "$THREADS" 2>&1 |
  tee "$WORK/torch.log" | sed 's/^/  /'
TORCH_TPS=$(grep -o '^torch tokens per second: [0-9.]*' "$WORK/torch.log" | awk '{print $5}')
[[ -n "$TORCH_TPS" ]] || { echo "torch_bench.py failed" >&2; exit 1; }
if grep -q '/blas/libblas\.so' "$WORK/torch.log"; then
  echo "WARNING: PyTorch ran on the reference (netlib) BLAS, an unoptimised baseline; set TORCH_BLAS_DIR to an OpenBLAS directory for a fair comparison"
fi

echo "== result (threads $THREADS, load average at end: $(cut -d' ' -f1-3 /proc/loadavg))"
printf '  trainc          %10.1f tokens/s\n' "$TRAINC_TPS"
printf '  PyTorch eager   %10.1f tokens/s\n' "$TORCH_TPS"
awk -v a="$TRAINC_TPS" -v b="$TORCH_TPS" 'BEGIN { printf "  ratio trainc/PyTorch: %.2f\n", a / b }'
