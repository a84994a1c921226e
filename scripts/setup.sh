#!/usr/bin/env bash
# Installs every dependency (Debian's archive; PyPI's torch into .venv), then builds ddp.cpp's
# programs in Release into build/. Idempotent and non-interactive; run as root or with sudo
# available.
#
# usage: scripts/setup.sh [--libtorch wheel|debian] [extra cmake arguments]
#   --libtorch wheel   (the default) PyPI's torch and torchvision, pinned in
#                      scripts/python-requirements.txt, in the virtual environment .venv: its
#                      LibTorch (a CUDA build with NCCL) is what ddp.cpp compiles against, and its
#                      Python is the reference the tests and benches compare with. nvcc and the
#                      CUDA headers its CMake package needs come from NVIDIA's wheels, at torch's
#                      CUDA version: no CUDA toolkit is needed on the machine.
#   --libtorch debian  Debian's libtorch-dev (1.13.1 on Debian 12, 2.6.0 on Debian 13) and
#                      python3-torch as the reference; no .venv.
#   DDP_LIBTORCH=wheel|debian in the environment does the same as --libtorch.
#   DDP_SETUP_BUILD=0  install only, build nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

libtorch=${DDP_LIBTORCH:-wheel}
if [[ ${1:-} == --libtorch ]]; then
  libtorch=${2:-}
  shift 2 || shift
elif [[ ${1:-} == --libtorch=* ]]; then
  libtorch=${1#--libtorch=}
  shift
fi
if [[ $libtorch != wheel && $libtorch != debian ]]; then
  echo "setup: --libtorch (or DDP_LIBTORCH) must be 'wheel' or 'debian', not '$libtorch'" >&2
  exit 2
fi

packages=(
  build-essential cmake ninja-build pkg-config
  libgloo-dev                         # Gloo's headers, which c10d's ProcessGroupGloo.hpp includes
                                      # and PyPI's torch does not ship (CMakeLists.txt)
  libdnnl-dev ocl-icd-opencl-dev      # oneDNN 2.x's API: Winograd convolutions
                                      # (ddp/models/onednn_conv2d.h); its CMake package needs OpenCL's
  libgtest-dev googletest             # tests
  zlib1g-dev libcurl4-openssl-dev libarchive-dev libssl-dev   # IDX gzip, --download, MD5
  libtomlplusplus-dev                 # ddp-train --config run.toml
  libturbojpeg0-dev libspng-dev       # JPEG and PNG decoding (ddp/data/image.h)
  libjpeg-turbo-progs                 # tjbench: the decode benchmark's reference
  nlohmann-json3-dev                  # flight records (--debug-dir), --trace
  libprotobuf-dev protobuf-compiler   # ddp-train --tensorboard (event files)
  libplplot-dev plplot-driver-cairo   # ddp-train plot (PNG through cairo, SVG)
  libcairo2-dev                       # ddp-train preview (image grids as PNG)
  python3                             # the reference implementation's interpreter
  dataset-fashion-mnist               # the real Fashion-MNIST
  iproute2 tar                        # multi-node tests (network namespaces), archives
  clang libclang-rt-dev               # the libFuzzer targets (scripts/fuzz.sh)
)
if [[ $libtorch == wheel ]]; then
  packages+=(python3-venv)            # .venv for PyPI's torch
else
  packages+=(
    libtorch-dev                      # LibTorch with c10d (Gloo, TCPStore)
    libopenblas0-openmp               # LibTorch's BLAS: else libblas.so.3 is the reference
                                      # BLAS, and torch::mm runs at ~5 GFLOP/s instead of ~160
    python3-torch python3-torchvision # the reference implementation
  )
  # Debian 13's LibTorch 2.6 is built with c10d's MPI backend, whose header includes <mpi.h>.
  version=$(apt-cache show --no-all-versions libtorch-dev 2>/dev/null | sed -n 's/^Version: //p')
  [[ $version == 2.* ]] && packages+=(mpi-default-dev)
fi

source scripts/lib/debian_packages.sh
install_missing_packages setup "${packages[@]}"

# Every optional part (cmake/OptionalParts.cmake) is asked for: a package missing from the list
# above fails the configure step, naming it. oneDNN's layers need oneDNN 2.x (Debian 12's).
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
for part in GZIP JPEG PNG DOWNLOAD TOML TENSORBOARD PLOT CAIRO; do cmake_args+=(-DDDP_WITH_$part=ON); done
if [[ $(dpkg-query -W -f='${Version}' libdnnl-dev) == 2.* ]]; then
  cmake_args+=(-DDDP_WITH_ONEDNN=ON)
else
  cmake_args+=(-DDDP_WITH_ONEDNN=OFF)
fi
if [[ $libtorch == wheel ]]; then
  [[ -x .venv/bin/python ]] || /usr/bin/python3 -m venv .venv
  echo "setup: PyPI's torch into .venv ($(grep -v '^#' scripts/python-requirements.txt | xargs))"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/python-requirements.txt
  # The benches' own packages (bench/requirements.txt: scikit-image's photographs, which
  # tools/make_imagefolder.py cuts its ImageNet-like JPEG folders from).
  .venv/bin/python -m pip install -q --disable-pip-version-check -r bench/requirements.txt
  torch_prefix=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
  torch_dir=$torch_prefix/Torch
  cmake_args+=(-DTorch_DIR="$torch_dir" -DDDP_PYTHON="$PWD/.venv/bin/python")
  # A CUDA build of torch has a CMake package that needs a CUDA toolkit with nvcc to configure
  # anything: NVIDIA's toolkit wheels at the version torch itself requires, so that a machine
  # without /usr/local/cuda builds too, with the CUDA and NCCL code paths compiled
  # (cmake/WheelCudaToolkit.cmake points CMake at them).
  cuda_toolkit=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("cuda-toolkit"))' 2>/dev/null || true)
  torch_cuda=$(.venv/bin/python -c 'import torch; print(torch.version.cuda or "")')
  if [[ -n $cuda_toolkit ]]; then
    echo "setup: NVIDIA's nvcc and CUDA headers into .venv (cuda-toolkit[nvcc,cccl]==$cuda_toolkit, torch's CUDA)"
    .venv/bin/python -m pip install -q --disable-pip-version-check "cuda-toolkit[nvcc,cccl]==$cuda_toolkit"
  elif [[ -n $torch_cuda ]]; then
    echo "setup: warning: torch is built for CUDA $torch_cuda but does not depend on NVIDIA's" \
      "cuda-toolkit wheels (CUDA 13's), so configuring needs a CUDA $torch_cuda toolkit on this" \
      "machine (nvcc in /usr/local/cuda, or -DCMAKE_CUDA_COMPILER=...)" >&2
  fi
else
  torch_dir=""
  cmake_args+=(-DDDP_LIBTORCH_FROM_VENV=OFF -DDDP_PYTHON=/usr/bin/python3)
fi

[[ ${DDP_SETUP_BUILD:-1} == 0 ]] && exit 0

# A build folder configured against another LibTorch is started afresh: CMake's cache would keep
# the old one's paths, and a wheel of another version at the same path its CUDA version (which
# torch's CMake package then finds at odds with the new headers).
cached=$(sed -n 's/^Torch_DIR:PATH=//p' build/CMakeCache.txt 2>/dev/null || true)
if [[ -n $cached && ($libtorch == wheel && $cached != "$torch_dir" ||
  $libtorch == debian && $cached != /usr/*) ]]; then
  echo "setup: build/ was configured against $cached; configuring it afresh"
  rm -rf build
fi
if [[ $libtorch == wheel ]]; then
  torch_version=$(.venv/bin/python -c 'import torch; print(torch.__version__)')
  configured=$(cat build/.setup-torch-version 2>/dev/null || true)
  if [[ -f build/CMakeCache.txt && $configured != "$torch_version" ]]; then
    echo "setup: build/ was configured against torch ${configured:-of another setup}, .venv has" \
      "$torch_version; configuring it afresh"
    rm -rf build
  fi
  mkdir -p build
  echo "$torch_version" >build/.setup-torch-version
fi
cmake -S . -B build "${cmake_args[@]}" "$@"
# The programs a user runs first; the test binaries (about a third of the compile time) are built
# by scripts/test.sh and the bench programs by bench/common.sh, when first needed.
cmake --build build -j "$(nproc)" --target ddp-train ddprun example-minimal example-train-net \
  example-train-table
echo "setup: built build/ddp-train and build/ddprun ($(build/ddp-train --version | head -1))"
