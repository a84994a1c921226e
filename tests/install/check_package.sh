#!/usr/bin/env bash
# The installed package as its users meet it: installs BUILD_DIR into a temporary prefix, then
# builds examples/ out of tree against it, twice:
#  1. the core alone (find_package(ddp), ddp::ddp): its configure step must look for none of the
#     data component's libraries, and the program must load neither libcurl, libarchive, OpenSSL,
#     TurboJPEG, libspng nor protobuf;
#  2. with the components (find_package(ddp COMPONENTS data models)).
# Each program then runs under the installed ddprun on 2 ranks. scripts/test.sh runs this after
# the suite.
# usage: tests/install/check_package.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: tests/install/check_package.sh BUILD_DIR}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "check_package: $*" >&2; exit 1; }
say() { echo "check_package: $*"; }

cmake --install "$build" --prefix "$prefix/usr" >/dev/null
# Nothing installed may depend on the build folder, which a user deletes.
build_path=$(realpath "$build")
leaked=$(grep -rlF "$build_path/" "$prefix/usr" || true)
[[ -z $leaked ]] || fail "installed files name the build folder $build_path: $leaked"
for library in ddp ddp_data ddp_models; do
  soname=$(readelf -d "$prefix/usr/lib/lib$library.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
  [[ $soname == lib$library.so.* ]] || fail "lib$library.so has no versioned SONAME ('$soname')"
  say "lib$library.so: SONAME $soname"
done

# 1. The core alone.
cmake -S examples -B "$prefix/core" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix/usr" -DDDP_EXAMPLES_CORE_ONLY=ON >/dev/null
cmake --build "$prefix/core" >/dev/null
looked_for=$(grep -Ei '^(curl|libarchive|openssl|zlib|protobuf|dnnl|turbojpeg|spng)_[a-z_]*:' "$prefix/core/CMakeCache.txt" || true)
[[ -z $looked_for ]] || fail "the core-only consumer's configure looked for: $looked_for"
loaded=$(ldd "$prefix/core/minimal" | grep -E 'libcurl|libarchive|libssl|libcrypto|libprotobuf|libturbojpeg|libspng' || true)
[[ -z $loaded ]] || fail "the core-only consumer loads: $loaded"
say "core only: configured and linked without libcurl, libarchive, OpenSSL, zlib, TurboJPEG, libspng or protobuf"
"$prefix/usr/bin/ddprun" --nproc-per-node 2 -- "$prefix/core/minimal" | tee "$prefix/core.out"
grep -q "epoch 5: mean loss" "$prefix/core.out" || fail "the core-only example did not train"

# 2. The core with the data and models components.
cmake -S examples -B "$prefix/all" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix/usr" >/dev/null
cmake --build "$prefix/all" >/dev/null
"$prefix/usr/bin/ddprun" --nproc-per-node 2 -- "$prefix/all/train_net" | tee "$prefix/all.out"
grep -q "epoch 3: loss" "$prefix/all.out" || fail "the components' example did not train"
"$prefix/usr/bin/ddprun" --nproc-per-node 2 -- "$prefix/all/train_table" | tee "$prefix/table.out"
grep -q "epoch 5: loss" "$prefix/table.out" || fail "the non-image example did not train"
say "passed: the installed package builds its consumers, core alone and with its components"
