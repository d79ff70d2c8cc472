#!/usr/bin/env bash
# Installs the Debian 12 packages trainc needs to build and test. Idempotent: packages already
# installed are not touched, and apt-get runs only when something is missing.
#   scripts/setup.sh           build + test dependencies
#   scripts/setup.sh --torch   also Debian's python3-torch (for the opt-in PyTorch comparison tests)
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config python3 procps
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  libabsl-dev libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev googletest
  libdnnl-dev ocl-icd-opencl-dev libgloo-dev
  clang libclang-rt-dev
  nlohmann-json3-dev libicu-dev python3-numpy python3-protobuf
  libsentencepiece-dev sentencepiece python3-regex
)
for arg in "$@"; do
  case "$arg" in
    # Debian's torch uses the reference BLAS unless an optimised one is installed. The OpenMP
    # OpenBLAS shares torch's OpenMP thread pool; the pthread build runs its own pool next to
    # torch's, which oversubscribes the cores and slowed PyTorch 2-3.5x on 2 cores (issue 17).
    # This makes the PyTorch side of bench/train_throughput.sh the baseline its users would get.
    --torch) packages+=(python3-torch python3-numpy libopenblas0-openmp) ;;
    *) echo "setup.sh: unknown option '$arg' (expected --torch)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup.sh: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
