#!/usr/bin/env bash
# Builds what is not built yet, runs the whole test suite (unit, multi-rank, multi-process) with
# CTest, then builds the installed package's consumers (tests/install/check_package.sh). With
# CTest arguments (e.g. -R Sampler), only those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# The test binaries, which scripts/setup.sh leaves to this first run (and anything changed since).
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j 2 "$@"
if (($# == 0)); then
  tests/install/check_package.sh build
fi
