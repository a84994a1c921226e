#!/usr/bin/env bash
# Runs the whole test suite (unit, multi-rank, multi-process) with CTest, then builds the
# installed package's consumers (tests/install/check_package.sh). With CTest arguments (e.g.
# -R Sampler), only those tests.
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir build --output-on-failure -j 2 "$@"
if (($# == 0)); then
  tests/install/check_package.sh build
fi
