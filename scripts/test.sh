#!/usr/bin/env bash
# Builds everything and runs all tests: gtest unit tests and lit/FileCheck tests, both under ctest.
# Opt-in tests (labelled "optin") need extra hardware or packages and are skipped unless
# TRAINC_TEST_OPTIN=1.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRAINC_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh"
cd "$build"
jobs="$(nproc)"
if [ "${TRAINC_TEST_OPTIN:-0}" = "1" ]; then
  ctest --output-on-failure -j "$jobs"
else
  ctest --output-on-failure -j "$jobs" -LE optin
fi
