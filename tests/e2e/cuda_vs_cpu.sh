#!/usr/bin/env bash
# GPU end-to-end test: a tiny Llama (RoPE, RMSNorm, SwiGLU, GQA, hidden dropout 0.1) trains 20
# iterations on the CPU backend and on the CUDA backend from the same plan and seed; the per-
# iteration losses and gradient norms must agree within a relative 1e-4 (fp32; dropout masks are
# the same Philox counters on both backends).
#
# usage: cuda_vs_cpu.sh TRAINC TRAINRUN WORK_DIR
# Exits 77 (skipped) when trainrun --backend cuda reports no usable device or library.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 TRAINC TRAINRUN WORK_DIR" >&2
  exit 2
fi
TRAINC=$1
TRAINRUN=$2
WORK=$3
ITERS=${CUDA_VS_CPU_ITERS:-20}
cuda_vs_cpu_flags() {
  echo --preset llama-tiny-text --num-query-groups 2 --seq-length 64 \
    --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 8 \
    --hidden-dropout 0.1 --attention-dropout 0.0 --lr 1e-3 --lr-warmup-iters 2 --clip-grad 1.0 \
    --weight-decay 0.1
}
if [[ "$TRAINC" == "--print-flags" ]]; then
  cuda_vs_cpu_flags
  exit 0
fi
rm -rf "$WORK"
mkdir -p "$WORK/cpu" "$WORK/cuda"

# CUDA_VS_CPU_PLAN: a plan compiled beforehand with the flags below (scripts/gpu_check.sh carries
# one to machines without the compiler's libraries); TRAINC is then unused.
if [[ -n "${CUDA_VS_CPU_PLAN:-}" ]]; then
  cp -r "$CUDA_VS_CPU_PLAN" "$WORK/plan"
else
  "$TRAINC" compile $(cuda_vs_cpu_flags) --train-iters "$ITERS" -o "$WORK/plan" \
    >"$WORK/compile.log" 2>&1 || { cat "$WORK/compile.log"; exit 1; }
fi

if ! "$TRAINRUN" --backend cuda "$WORK/plan" -- --mock-data --train-iters 1 \
     >"$WORK/probe.log" 2>&1; then
  if grep -q -e "no CUDA device" -e "cannot load" -e "built without CUDA" "$WORK/probe.log"; then
    echo "SKIP: $(grep -m1 'error' "$WORK/probe.log")"
    exit 77
  fi
  cat "$WORK/probe.log"
  exit 1
fi

for b in cpu cuda; do
  start=$(date +%s.%N)
  "$TRAINRUN" --backend "$b" "$WORK/plan" -- --mock-data --log-interval 5 --dump-dir "$WORK/$b" \
    >"$WORK/$b.log" 2>&1 || { cat "$WORK/$b.log"; exit 1; }
  end=$(date +%s.%N)
  echo "$b: $ITERS iterations in $(echo "$end - $start" | bc) s (including start-up)"
done

/usr/bin/python3 - "$WORK/cpu/losses.txt" "$WORK/cuda/losses.txt" <<'PY'
import sys
def read(p):
    rows = [l.split() for l in open(p) if l.strip()]
    return {int(r[0]): (float(r[1]), float(r[2])) for r in rows}
cpu, gpu = read(sys.argv[1]), read(sys.argv[2])
assert cpu.keys() == gpu.keys() and cpu, (sorted(cpu), sorted(gpu))
worst = 0.0
for it in sorted(cpu):
    for k, name in ((0, "loss"), (1, "grad norm")):
        a, b = cpu[it][k], gpu[it][k]
        rel = abs(a - b) / max(abs(a), 1e-30)
        worst = max(worst, rel)
        if rel > 1e-4:
            sys.exit(f"iteration {it}: {name} cpu {a!r} cuda {b!r} (relative {rel:.3g} > 1e-4)")
print(f"cuda vs cpu: {len(cpu)} iterations, worst relative difference {worst:.3g} (limit 1e-4)")
PY
