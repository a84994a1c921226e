#!/usr/bin/env bash
# Installs ddp.cpp into a temporary prefix, builds examples/ out of tree against it with
# find_package(ddp), and runs the result under the installed ddprun.
# usage: check_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix/usr" >/dev/null
cmake -S "$src/examples" -B "$prefix/example-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix/usr" >/dev/null
cmake --build "$prefix/example-build"
"$prefix/usr/bin/ddprun" --nproc-per-node 2 -- "$prefix/example-build/minimal"
