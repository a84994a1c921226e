#!/usr/bin/env bash
# Builds ddp.cpp for arm64 Linux (AWS Graviton, NVIDIA Grace) on this x86-64 machine and runs it
# there under qemu-user: the unit tests, then the quick start's first steps, on one rank and on
# two (DDP over Gloo). It proves that the code builds and gives the same numbers on arm64, where
# only LibTorch's kernels and the portable C++ run (the oneDNN 2.x layers step aside at run time:
# oneDNN has no jit kernel for them there). qemu emulates the CPU instruction by instruction, so
# it says nothing of speed. docs/arm64.md says what it proves and what it does not.
#
#  1. Debian's g++-aarch64-linux-gnu, qemu-user-static and mmdebstrap on this machine.
#  2. An arm64 root of Debian 12's libraries (mmdebstrap --variant=extract: unpacked, nothing of
#     it runs) in build-arm64/root, with the CPU part of PyPI's aarch64 torch wheel (the version
#     scripts/python-requirements.txt pins) in its opt/torch.
#  3. The build (cmake/arm64/aarch64-linux-gnu.cmake) in build-arm64/build, then the tests.
#
# usage: scripts/arm64-check.sh [ctest arguments; default: -L '^unit_tests$', the unit tests]
#   DDP_CACHE=dir   downloads kept between runs (default /var/cache/ddp.cpp)
#   DDP_DEBIAN_MIRROR=url   the Debian mirror (default http://deb.debian.org/debian)
# Needs root (apt-get, binfmt_misc). About 40 minutes on 2 vCPUs: 10 compiling, 4 for the unit
# tests, the rest for the quick start's runs, which qemu slows about 30 times.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$repo/build-arm64
root=$out/root
cache=${DDP_CACHE:-/var/cache/ddp.cpp}/arm64
mirror=${DDP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
step() { echo "arm64-check: $*"; }

# 1. The cross compiler, the emulator, and binfmt so that arm64 programs a test starts run too.
host_packages=(g++-aarch64-linux-gnu qemu-user-static binfmt-support mmdebstrap cmake ninja-build
  pkg-config unzip)
source scripts/lib/debian_packages.sh
install_missing_packages arm64-check "${host_packages[@]}"
if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
  update-binfmts --enable qemu-aarch64
fi

# 2. The root: the arm64 packages that the build links (setup.sh's list, less the programs'
# optional parts, which are the same code on every CPU), unpacked, remade when the list changes.
root_packages=(libc6-dev libstdc++-12-dev libgtest-dev libgmock-dev libgloo-dev nlohmann-json3-dev
  zlib1g-dev libturbojpeg0-dev libspng-dev libdnnl-dev ocl-icd-opencl-dev)
stamp="bookworm ${root_packages[*]}"
if [[ $(cat "$root/.ddp-packages" 2>/dev/null) != "$stamp" ]]; then
  step "Debian 12's arm64 libraries into $root"
  rm -rf "$root"
  mkdir -p "$out"
  packages=$(
    IFS=,
    echo "${root_packages[*]}"
  )
  mmdebstrap --quiet --variant=extract --architectures=arm64 --include="$packages" bookworm \
    "$root" "$mirror"
  echo "$stamp" >"$root/.ddp-packages"
fi

# The torch wheel: its headers and CPU libraries. It is a CUDA build: libtorch_cpu.so needs
# libcudart.so.13 and libcupti.so.13 (the profiler's), and PyPI serves the aarch64 builds of
# those to pip only as torch's dependencies (this workplace's index has none). Stand-ins that
# export the same names, each returning an error, are enough: a CPU-only program never calls them.
torch_spec=$(grep -E '^torch==' scripts/python-requirements.txt)
torch_version=${torch_spec#torch==}
if [[ $(cat "$root/opt/torch/.ddp-version" 2>/dev/null) != "$torch_version" ]]; then
  step "PyPI's aarch64 $torch_spec (CPU part) into $root/opt/torch"
  mkdir -p "$cache/wheels"
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps \
    --only-binary=:all: --platform manylinux_2_28_aarch64 --python-version 3.11 \
    -d "$cache/wheels" "$torch_spec"
  wheel=$(ls "$cache/wheels"/torch-"$torch_version"-cp311-cp311-manylinux_2_28_aarch64.whl)
  rm -rf "$root/opt/torch" "$root/opt/nvidia" "$root/opt/unpack"
  mkdir -p "$root/opt/unpack"
  unzip -q "$wheel" 'torch/include/*' 'torch/lib/*' torch/version.py -x 'torch/lib/*cuda*' \
    'torch/lib/*nvshmem*' 'torch/lib/*nvrtc*' 'torch/lib/libtorch_python*' -d "$root/opt/unpack"
  mv "$root/opt/unpack/torch" "$root/opt/torch"
  rmdir "$root/opt/unpack"
  mkdir -p "$root/opt/torch/share/cmake/Torch"
  cp cmake/arm64/TorchConfig.cmake "$root/opt/torch/share/cmake/Torch/"
  # Where libtorch_cpu.so's RPATH looks ($ORIGIN/../../nvidia/cu13/lib).
  stubs=$root/opt/nvidia/cu13/lib
  mkdir -p "$stubs"
  for library in libcudart.so.13 libcupti.so.13; do
    mapfile -t symbols < <(readelf --dyn-syms -W "$root/opt/torch/lib/libtorch_cpu.so" |
      awk -v lib="@$library" '$7 == "UND" && index($8, lib) { sub(/@.*/, "", $8); print $8 }' |
      sort -u)
    {
      for symbol in "${symbols[@]}"; do echo "int $symbol(void) { return 999; }"; done
    } >"$stubs/$library.c"
    printf '%s { global: %s; local: *; };\n' "$library" "$(
      IFS=';'
      echo "${symbols[*]}"
    )" >"$stubs/$library.map"
    aarch64-linux-gnu-gcc -shared -fPIC -o "$stubs/$library" -Wl,-soname,"$library" \
      -Wl,--version-script,"$stubs/$library.map" "$stubs/$library.c"
  done
  echo "$torch_version" >"$root/opt/torch/.ddp-version"
fi

# qemu-user shows arm64 programs this machine's own /proc/cpuinfo and sysfs, which describe an
# x86 CPU; LibTorch's cpuinfo (2.15.0) crashes on them. qemu looks for a path in the root first,
# so the root holds what a 2-core AWS Graviton2 (Neoverse N1, the CPU qemu emulates: QEMU_CPU)
# shows there.
mkdir -p "$root/proc" "$root/sys/devices/system/cpu"
for cpu in 0 1; do
  printf '%s\t: %s\n' processor "$cpu" BogoMIPS 243.75 \
    Features 'fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs' \
    'CPU implementer' 0x41 'CPU architecture' 8 'CPU variant' 0x3 'CPU part' 0xd0c 'CPU revision' 1
  echo
  mkdir -p "$root/sys/devices/system/cpu/cpu$cpu/regs/identification"
  echo 0x00000000413fd0c1 >"$root/sys/devices/system/cpu/cpu$cpu/regs/identification/midr_el1"
done >"$root/proc/cpuinfo"
for list in possible present online; do echo 0-1 >"$root/sys/devices/system/cpu/$list"; done
export QEMU_CPU=${QEMU_CPU:-neoverse-n1}

# 3. The build: the programs and the unit tests. The reference Python (goldens, Pillow) is this
# machine's .venv: it only writes files that the arm64 tests read.
step "configuring and building in $out/build"
cmake -S . -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$repo/cmake/arm64/aarch64-linux-gnu.cmake" -DDDP_ARM64_ROOT="$root" \
  -DDDP_LIBTORCH_FROM_VENV=OFF -DDDP_PYTHON="$repo/.venv/bin/python" >"$out/configure.log" ||
  { cat "$out/configure.log"; exit 1; }
grep -E '^-- ddp:' "$out/configure.log"
cmake --build "$out/build" -j "$(nproc)" --target ddp-train unit_tests

# The programs a test starts (workers, the reference's helpers) find the root's libraries
# through qemu's prefix, which binfmt's qemu reads from the environment.
export QEMU_LD_PREFIX=$root
step "the unit tests under qemu-aarch64"
if (($#)); then
  ctest --test-dir "$out/build" --output-on-failure "$@"
else
  ctest --test-dir "$out/build" --output-on-failure -j 2 --timeout 900 -L "^unit_tests$"
fi

# The quick start's first steps: one rank, then two (DDP over Gloo). Each run's losses and
# accuracy, as printed (4 digits), must equal this machine's native build's (build/ddp-train,
# when there is one): the same numbers on both CPUs, up to rounding below what is printed.
quick_start=(--dataset fashion-mnist --epochs 1 --max-steps 20)
"$out/build/ddp-train" --version
for ranks in 1 2; do
  step "the quick start's first 20 steps under qemu-aarch64 on $ranks rank(s)"
  log=$out/quick-start-$ranks.log
  "$out/build/ddp-train" "${quick_start[@]}" --nproc-per-node "$ranks" 2>&1 | tee "$log"
  arm64=$(grep -oE 'train_loss .* test_acc [0-9.]+%' "$log")
  if [[ -x build/ddp-train ]]; then
    native=$(build/ddp-train "${quick_start[@]}" --nproc-per-node "$ranks" 2>&1 |
      grep -oE 'train_loss .* test_acc [0-9.]+%')
    if [[ $arm64 != "$native" ]]; then
      echo "arm64-check: on $ranks rank(s) arm64 gave '$arm64', this machine '$native'" >&2
      exit 1
    fi
    step "$ranks rank(s): $arm64, as on this machine"
  fi
done
step "passed"
