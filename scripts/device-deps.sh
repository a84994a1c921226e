#!/usr/bin/env bash
# Gathers into .device/ (git-ignored) the build dependencies that a machine without Debian's
# development packages lacks, so that they can travel with the tree (the device tool's `carry`):
# GoogleTest's sources (Debian's googletest) and Gloo's headers (Debian's libgloo-dev), which
# c10d's ProcessGroupGloo.hpp includes and PyPI's torch does not ship. scripts/gpu-check.sh uses
# them when it finds them. Run it where scripts/setup.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
for need in /usr/src/googletest/CMakeLists.txt /usr/include/gloo/algorithm.h; do
  [[ -f $need ]] || { echo "device-deps: $need is missing: run scripts/setup.sh first" >&2; exit 1; }
done
rm -rf .device
mkdir -p .device/include
cp -r /usr/src/googletest .device/googletest
cp -r /usr/include/gloo .device/include/gloo
echo "device-deps: .device/ holds googletest ($(du -sh .device | cut -f1)); carry it: carry=[\".device\"]"
