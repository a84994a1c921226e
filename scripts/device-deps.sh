#!/usr/bin/env bash
# Gathers into .device/ (git-ignored) the build dependencies that a machine without Debian's
# development packages lacks, so that they can travel with the tree (the device tool's `carry`):
# GoogleTest's sources (Debian's googletest) and Gloo's headers (Debian's libgloo-dev), which
# c10d's ProcessGroupGloo.hpp includes and PyPI's torch does not ship, and TurboJPEG (Debian's
# libturbojpeg0-dev) for the image-folder check. scripts/gpu-check.sh uses them when it finds
# them. Run it where scripts/setup.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
jpeg_lib=$(find /usr/lib -name 'libturbojpeg.so.0*' -type f | head -1)
for need in /usr/src/googletest/CMakeLists.txt /usr/include/gloo/algorithm.h /usr/include/turbojpeg.h \
  "${jpeg_lib:-/usr/lib/x86_64-linux-gnu/libturbojpeg.so.0}"; do
  [[ -f $need ]] || { echo "device-deps: $need is missing: run scripts/setup.sh first" >&2; exit 1; }
done
rm -rf .device
mkdir -p .device/include
cp -r /usr/src/googletest .device/googletest
cp -r /usr/include/gloo .device/include/gloo
# libjpeg-turbo's TurboJPEG (Debian's libturbojpeg0-dev) for the image-folder check: it needs
# only the C library, so Debian 12's build runs on any newer glibc.
mkdir -p .device/lib
cp /usr/include/turbojpeg.h .device/include/
cp "$jpeg_lib" .device/lib/
ln -sf "$(basename "$jpeg_lib")" .device/lib/libturbojpeg.so.0
ln -sf libturbojpeg.so.0 .device/lib/libturbojpeg.so
echo "device-deps: .device/ holds GoogleTest, Gloo's headers and TurboJPEG ($(du -sh .device | cut -f1)); carry it: carry=[\".device\"]"
