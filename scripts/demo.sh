#!/usr/bin/env bash
# The main job on its built-in default: builds trainc if needed, then assembles a one-block
# transformer program (forward, backward, AdamW, two microbatches), validates it and trains it on the
# CPU backend, printing the loss of each step. Extra arguments go to `trainc-rt demo`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRAINC_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" trainc-rt >/dev/null
exec "$build/tools/trainc-rt" demo "$@"
