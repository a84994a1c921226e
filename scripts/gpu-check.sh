#!/usr/bin/env bash
# The GPU path in one call, on a machine with an NVIDIA GPU and a CUDA build of PyTorch (python3's
# torch), nothing else from Debian needed: builds ddp.cpp against that LibTorch with every
# optional part off (GoogleTest and Gloo's headers from .device/, which scripts/device-deps.sh
# fills, where the machine has none), then
#   1. the Gpu.* tests (an NCCL world of one: every NCCL call, DDP's buckets on the GPU); they
#      must run, not skip;
#   2. DDP on CUDA tensors across 2 processes that share GPU 0, through Gloo (NCCL refuses two
#      ranks on one GPU): both ranks must end with the same weights;
#   3. a checkpoint written on the GPU that resumes on the CPU;
#   4. the speed table: ddp-train against PyTorch running the reference program on the same GPU
#      (bench/gpu_compare.sh), batch 64 and 512, fp32 and bf16;
#   5. own images: ResNet-50, bf16, channels-last, batch 256 on GPU 0, ddp-train's loader on the
#      machine's cores against PyTorch's DataLoader with num_workers = the cores
#      (bench/imagefolder_e2e.sh on JPEGs tools/make_imagefolder.py writes there); needs
#      TurboJPEG, which scripts/device-deps.sh puts in .device/.
# Everything it prints also goes to $OUT (the device tool's folder; else $build/out): the log,
# and the speed tables alone in gpu-speed.md and gpu-images.md.
#
# usage: scripts/gpu-check.sh [--rehearse] [--images-only]
#   --rehearse      on a machine without a GPU: the same build and steps 2-3 on the CPU, short
#                   steps 4 and 5 on the CPU (ResNet-18 at 64x64), step 1 allowed to skip; for
#                   finding build errors before device time is spent
#   --images-only   the build (ddp-train alone) and step 5: to fit one device call
#   LIBTORCH=/path  a LibTorch (default: python3's torch, torch.utils.cmake_prefix_path)
#   PYTHON=/path    the Python with torch (default python3)
#   DDP_GPU_BUILD   the build folder (default build-gpu)
set -uo pipefail
cd "$(dirname "$0")/.."
rehearse=0 images_only=0
for arg in "$@"; do
  case $arg in
    --rehearse) rehearse=1 ;;
    --images-only) images_only=1 ;;
    *) echo "usage: scripts/gpu-check.sh [--rehearse] [--images-only]" >&2 && exit 2 ;;
  esac
done
build=${DDP_GPU_BUILD:-build-gpu}
python=${PYTHON:-python3}
out=${OUT:-$build/out}
mkdir -p "$out" "$build"
exec > >(tee "$out/gpu-check.log") 2>&1

say() { echo "gpu-check: $(date +%T) $*"; }
failures=()
fail() {
  say "FAILED: $*"
  failures+=("$*")
}
finish() {
  cp "$build/configure.log" "$build/build.log" "$out/" 2>/dev/null
  if ((${#failures[@]})); then
    say "${#failures[@]} check(s) failed:"
    printf '  - %s\n' "${failures[@]}"
    exit 1
  fi
  say "every check passed"
  exit 0
}

# 5. Own images (run by the steps below, after the build).
own_images() {
  if ! grep -q "JPEG=ON" "$build/configure.log"; then
    fail "ddp-train has no JPEG decoding: run scripts/device-deps.sh where setup has run, carry .device"
    return
  fi
  local images=$build/check-images cores
  cores=$(nproc)
  local size=224 model=resnet50 batch=256 precision=bf16 device=cuda steps=30 classes=16 each=500
  ((rehearse)) && size=64 model=resnet18 batch=16 device=cpu steps=8 classes=4 each=40
  say "own images: writing $((classes * each)) JPEGs (tools/make_imagefolder.py)"
  rm -rf "$images"
  "$python" tools/make_imagefolder.py "$images" --classes "$classes" --train "$each" --val 1 \
    --jobs "$cores" || { fail "tools/make_imagefolder.py"; return; }
  say "own images: $model, $precision, channels-last, batch $batch on $device (bench/imagefolder_e2e.sh)"
  DDP_BUILD=$build DDP_PYTHON=$python RANKS=1 BATCH=$batch IMAGE_SIZE=$size MODEL=$model \
    DEVICE=$device PRECISION=$precision WORKERS=$cores REFERENCE_FLAGS=--channels-last \
    DDP_TRAIN_FLAGS="--channels-last --loader-threads $cores" \
    bench/imagefolder_e2e.sh "$images" 2 "$steps" | tee "$out/gpu-images.md"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail "bench/imagefolder_e2e.sh on $device"
}

# 0. The machine.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if ((gpus == 0 && !rehearse)); then
  say "no GPU is visible (nvidia-smi -L lists none); run this on a GPU machine, or --rehearse"
  exit 77
fi
nvidia-smi -L 2>/dev/null
say "$gpus GPU(s); $(nproc) cores; $(cmake --version | head -1); $(${CXX:-c++} --version | head -1)"
command -v nvcc >/dev/null && say "nvcc: $(nvcc --version | tail -1)"
LIBTORCH=${LIBTORCH:-$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')} ||
  { say "python3 has no torch; set LIBTORCH and PYTHON"; exit 1; }
say "PyTorch $("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)'); LibTorch from $LIBTORCH"

# 1. Build: nothing but LibTorch and GoogleTest.
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$LIBTORCH"
  -DDDP_LIBTORCH_FROM_VENV=OFF -DDDP_PYTHON="$(command -v "$python")")
for part in GZIP DOWNLOAD TOML TENSORBOARD PLOT ONEDNN; do cmake_args+=(-DDDP_WITH_$part=OFF); done
[[ -f .device/googletest/CMakeLists.txt ]] && cmake_args+=(-DDDP_GTEST_SOURCE_DIR="$PWD/.device/googletest")
[[ -f .device/include/gloo/algorithm.h ]] && cmake_args+=(-DDDP_GLOO_INCLUDE_DIR="$PWD/.device/include")
[[ -f .device/include/turbojpeg.h ]] && cmake_args+=(-DDDP_WITH_JPEG=ON
  -DDDP_TURBOJPEG_INCLUDE_DIR="$PWD/.device/include" -DDDP_TURBOJPEG_LIBRARY="$PWD/.device/lib/libturbojpeg.so")
say "configure: cmake ${cmake_args[*]}"
cmake "${cmake_args[@]}" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; fail "configure"; finish; }
grep "ddp:" "$build/configure.log"
grep -q "LibTorch has CUDA and c10d's NCCL backend" "$build/configure.log" ||
  fail "CMake found no CUDA/NCCL in that LibTorch (see $build/configure.log)"
say "build"
targets=(ddp-train ddprun example-minimal unit_tests dist_tests)
((images_only)) && targets=(ddp-train)
if ! cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$build/build.log" 2>&1; then
  grep -B2 -A12 "error" "$build/build.log" | head -80
  fail "build"
  finish
fi
grep "warning:" "$build/build.log" | sort -u | head -20
"$build/ddp-train" --version

((images_only)) && { own_images; finish; }

# 2. The GPU tests.
say "the Gpu.* tests"
ctest --test-dir "$build" -R '^Gpu\.' --output-on-failure --timeout 300 | tee "$build/gpu-tests.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail "Gpu.* tests"
if grep -q "Skipped" "$build/gpu-tests.log" && ((!rehearse)); then
  fail "Gpu.* tests were skipped although a GPU is visible"
fi

# 3. DDP on CUDA tensors, 2 processes on GPU 0 through Gloo; and a GPU checkpoint resumed on the CPU.
device=cuda:0
((rehearse)) && device=cpu
data=$build/check-data
"$build/ddp-train" make-data --out "$data" --train 2000 --test 400 >/dev/null
say "2 processes, --device $device --backend gloo"
"$build/ddp-train" --nproc-per-node 2 --device "$device" --backend gloo --data-dir "$data" \
  --epochs 1 --max-steps 20 --timeout 120 | tee "$build/gloo.log"
if [[ ${PIPESTATUS[0]} -ne 0 ]]; then
  fail "2 processes on $device through Gloo"
elif [[ $(grep -o 'final weights fingerprint [0-9a-f]*' "$build/gloo.log" | sort -u | wc -l) -ne 1 ]]; then
  fail "the 2 ranks on $device ended with different weights"
fi
checkpoints=$build/check-checkpoints
rm -rf "$checkpoints"
say "a checkpoint written on $device, resumed on the CPU"
"$build/ddp-train" --device "${device%:*}" --data-dir "$data" --epochs 1 --max-steps 10 --no-eval \
  --checkpoint-dir "$checkpoints" >"$build/ckpt-gpu.log" 2>&1 ||
  { cat "$build/ckpt-gpu.log"; fail "training on $device with --checkpoint-dir"; }
"$build/ddp-train" --device cpu --data-dir "$data" --epochs 2 --max-steps 10 --no-eval \
  --checkpoint-dir "$checkpoints" --resume auto | tee "$build/ckpt-cpu.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] && grep -qi "resum" "$build/ckpt-cpu.log" ||
  fail "resuming on the CPU from the $device checkpoint"

# 4. Speed against PyTorch on the same GPU.
say "speed: bench/gpu_compare.sh"
if ((rehearse)); then
  DDP_BUILD=$build GPU_COMPARE_DEVICE=cpu bench/gpu_compare.sh 1 1 3 | tee "$out/gpu-speed.md"
else
  DDP_BUILD=$build bench/gpu_compare.sh 1 2 | tee "$out/gpu-speed.md"
fi
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail "bench/gpu_compare.sh"
grep -q "failed:" "$out/gpu-speed.md" && fail "a speed run failed (see the table)"
own_images
finish
