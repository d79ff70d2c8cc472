#!/usr/bin/env bash
# Configures (once) and builds trainc into build/ (or $TRAINC_BUILD_DIR) with Ninja and ccache.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRAINC_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/trainc-ccache}"
# Paths under the checkout are hashed relative to it, so a fresh clone elsewhere (CI) reuses the
# objects another clone compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$build" "$@"
