#!/bin/bash
# compare-dumps.sh DATA REF RUN...: compares each RUN's --dump-dir with REF's: losses and grad
# norms (1e-5 relative), initial weights (bitwise) and final weights (1e-5 relative L2), one line
# each; exits non-zero on the first difference. The key biases are left out of the final-weight
# comparison (their gradient is zero in exact arithmetic: see compare_weights_l2.py).
set -e
data=$1 ref=$2
shift 2
for run in "$@"; do
  /usr/bin/python3 "$data/compare_losses.py" "$ref/losses.txt" "$run/losses.txt" 1e-5
  /usr/bin/python3 "$data/compare_safetensors.py" "$ref/initial_weights.safetensors" "$run/initial_weights.safetensors" 0
  /usr/bin/python3 "$data/compare_weights_l2.py" "$ref/final_weights.safetensors" "$run/final_weights.safetensors" 1e-5 --skip 'linear_k\.bias$'
done
