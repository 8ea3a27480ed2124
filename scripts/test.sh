#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite on softrdma. Usage: scripts/test.sh [preset]
#   default  release build with debug info (the README command)
#   ci       the same with warnings as errors
#   asan     ASan + UBSan build; runs the suites linked with the sanitizer runtime
#            (third-party binaries cannot load a sanitized library, so "clients" is skipped)
#   tsan     TSan build of the same suites (progress thread, TCP links and listeners)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
scripts/setup.sh
scripts/build.sh "$preset"
extra=()
case "$preset" in asan | tsan) extra=(-LE clients) ;; esac
ctest --preset "$preset" -j2 "${extra[@]}"
