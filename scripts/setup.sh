#!/usr/bin/env bash
# Installs every dependency from Debian's archive (idempotent, non-interactive), then builds
# ddp.cpp in Release into build/. Usage: scripts/setup.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev            # LibTorch 1.13 with c10d (Gloo, TCPStore)
  libopenblas0-openmp                 # LibTorch's BLAS: else libblas.so.3 is the reference
                                      # BLAS, and torch::mm runs at ~5 GFLOP/s instead of ~160
  libdnnl-dev                         # oneDNN's API: Winograd convolutions (models/onednn_conv2d.h)
  libgtest-dev googletest             # tests
  zlib1g-dev libcurl4-openssl-dev libarchive-dev libssl-dev   # IDX gzip, --download, MD5
  libtomlplusplus-dev                 # ddp-train --config run.toml
  libprotobuf-dev protobuf-compiler   # ddp-train --tensorboard (event files)
  libplplot-dev plplot-driver-cairo   # ddp-train plot (PNG through cairo, SVG)
  python3 python3-torch python3-torchvision                  # the reference implementation
  dataset-fashion-mnist               # the real Fashion-MNIST
  iproute2 tar                        # multi-node tests (network namespaces), archives
  clang libclang-rt-dev               # the libFuzzer target for the data set readers
)

# DDP_LIBTORCH=cuda (Debian 13 with contrib and non-free): LibTorch 2.6 built with CUDA and
# NCCL, the CUDA toolkit its CMake package looks for, and Gloo built with CUDA to match; no
# python3-torch (the CUDA one conflicts with it), so this compiles but does not run the tests
# (scripts/check-libtorch2.sh --cuda).
if [[ ${DDP_LIBTORCH:-} == cuda ]]; then
  cpu_only=(libtorch-dev libgloo-dev python3-torch python3-torchvision)
  kept=()
  for p in "${packages[@]}"; do
    [[ " ${cpu_only[*]} " == *" $p "* ]] || kept+=("$p")
  done
  packages=("${kept[@]}" libtorch-cuda-dev libgloo-cuda-dev libnccl-dev nvidia-cuda-toolkit)
fi

# Debian 13's LibTorch 2.6 is built with c10d's MPI backend, whose header includes <mpi.h>.
libtorch_version=$(apt-cache show --no-all-versions libtorch-dev 2>/dev/null | sed -n 's/^Version: //p')
if [[ $libtorch_version == 2.* ]]; then
  packages+=(mpi-default-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# DDP_SETUP_BUILD=0: the packages only (scripts/check-libtorch2.sh --cuda builds what it can).
[[ ${DDP_SETUP_BUILD:-1} == 0 ]] && exit 0
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)"
echo "setup: built build/ddp-train and build/ddprun"
