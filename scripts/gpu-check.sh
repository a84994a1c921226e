#!/usr/bin/env bash
# The GPU/NCCL path, on a machine with an NVIDIA GPU and a CUDA build of LibTorch: builds
# ddp.cpp against that LibTorch (build-gpu/), runs the GPU tests and then the whole suite, and a
# short training run per configuration (CPU, one GPU, and NCCL over every GPU when there are 2+),
# printing images/s for each. Debian 12's LibTorch has no CUDA, so this does not run in CI.
#
# usage: scripts/gpu-check.sh [STEPS (200)]
#   LIBTORCH=/path    a CUDA LibTorch (default: the torch Python package's own,
#                     python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
#   DDP_GPU_BUILD=dir the build directory (default build-gpu)
# Needs CMake, Ninja, a C++17 compiler and the development files of GoogleTest, zlib, libcurl,
# libarchive and OpenSSL (scripts/setup.sh installs them on Debian). Exits 77 without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
build=${DDP_GPU_BUILD:-build-gpu}

say() { echo "gpu-check: $*"; }
fail() {
  echo "gpu-check: $*" >&2
  exit 1
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ $gpus -eq 0 ]]; then
  echo "gpu-check: no GPU is visible (nvidia-smi -L lists none); run this on a GPU machine" >&2
  exit 77
fi
python=$(command -v python3 || true)
if [[ -z ${LIBTORCH:-} ]]; then
  [[ -n $python ]] || fail "no python3 to ask for torch's LibTorch; set LIBTORCH=/path/to/libtorch"
  LIBTORCH=$("$python" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"
print(torch.utils.cmake_prefix_path)') ||
    fail "python3's torch has no usable CUDA; set LIBTORCH to a CUDA LibTorch"
fi
say "$gpus GPU(s); LibTorch from $LIBTORCH"

# 1. Build. The configure step must find CUDA and NCCL in that LibTorch, or nothing below tests them.
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$LIBTORCH")
# The Python reference the tests compare against: this machine's python3 with its torch.
[[ -n $python ]] && cmake_args+=(-DDDP_PYTHON="$python")
mkdir -p "$build"
cmake "${cmake_args[@]}" | tee "$build/configure.log"
grep -q "LibTorch has CUDA and c10d's NCCL backend" "$build/configure.log" ||
  fail "LibTorch at $LIBTORCH has no CUDA/NCCL (see $build/configure.log)"
cmake --build "$build"

# 2. Tests: the GPU ones first (they must run, not skip), then everything.
gpu_log=$(mktemp)
ctest --test-dir "$build" -R '^Gpu\.' --output-on-failure | tee "$gpu_log"
if grep -q 'Skipped' "$gpu_log"; then fail "GPU tests were skipped although a GPU is visible"; fi
suite=passed
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 600 || suite=FAILED
say "whole suite: $suite"

# 3. Short training runs on a synthetic CIFAR-format set, images/s from the metrics.
data=$(mktemp -d)
trap 'rm -rf "$data" "$gpu_log"' EXIT
"$build/ddp-train" make-data --out "$data/set" --format cifar10 >/dev/null
run() {  # NAME FLAGS...
  local name=$1
  shift
  local metrics="$data/$RANDOM.jsonl"
  if "$build/ddp-train" --data-dir "$data/set" --epochs 1 --max-steps "$steps" --no-eval \
    --log-every 1000000 --metrics "$metrics" "$@" >"$metrics.log" 2>&1; then
    printf '| %s | %s | %s |\n' "$name" "$*" \
      "$(sed -n 's/.*"images_per_second": \([0-9.]*\).*/\1/p' "$metrics" | tail -1 |
        awk '{ printf "%.0f", $1 }')"
  else
    printf '| %s | %s | failed: %s |\n' "$name" "$*" "$(tail -1 "$metrics.log")"
    suite=FAILED
  fi
}
echo
echo "| configuration | flags | images/s |"
echo "|---|---|---|"
run "CPU, one process" --device cpu
run "one GPU" --device cuda --batch-size 256 --channels-last
run "one GPU, reference batch" --device cuda
if ((gpus >= 2)); then
  run "$gpus GPUs, NCCL" --nproc-per-node "$gpus" --device cuda --batch-size 256 --channels-last
  run "$gpus GPUs, NCCL, fp16 hook" --nproc-per-node "$gpus" --device cuda --batch-size 256 \
    --channels-last --comm-hook fp16
else
  say "one GPU: NCCL ran in the Gpu.* tests (a world of one); the NCCL training run needs 2+ GPUs"
fi
echo "(ddp-train, $steps steps of one epoch, synthetic 32x32x3 data)"
[[ $suite == passed ]] || exit 1
