#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time: the
# data set readers (CIFAR-10, IDX), the image decoders (JPEG, PNG: where the build has
# TurboJPEG or libspng) and the checkpoint loader (our checkpoints and exports, Python's
# torch.save; LibTorch and the decoders' libraries are linked, not instrumented).
# usage: scripts/fuzz.sh [SECONDS per target (30)] [OUTPUT DIR (build/fuzz)] [SEED (1)]
#                       [BUILD ENV (build/fuzz-build.env: LibTorch's paths, written by CMake)]
# The test suite runs a fixed SEED, so that a CI run explores the same inputs each time and a
# failure reproduces; SEED 0 draws a new one per run, to search further (e.g. 600 0).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
out=${2:-build/fuzz}
seed=${3:-1}
env_file=${4:-build/fuzz-build.env}
if ! [[ $seconds =~ ^[1-9][0-9]*$ && $seed =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS >= 1] [OUTPUT DIR] [SEED >= 0]" >&2
  exit 2
fi
if [[ ! -f $env_file ]]; then
  echo "fuzz: $env_file not found: configure the build first (cmake -S . -B build)" >&2
  exit 2
fi
source "$env_file"
flags=(-std="$fuzz_std" -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
  -Iinclude -Isrc -Iapps/common "${fuzz_includes[@]}" -DUSE_DISTRIBUTED -DUSE_C10D_GLOO)
# -rss_limit_mb and -malloc_limit_mb bound what one input may allocate; -timeout its time.
# A finding is written to $out/ (crash-*, oom-*, timeout-*), named in the log.
run=(-seed="$seed" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10
  -print_final_stats=1 -artifact_prefix="$out/")

mkdir -p "$out/corpus" "$out/checkpoint-corpus"
cp -n fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
cp -n fuzz/checkpoint-corpus/* "$out/checkpoint-corpus/" 2>/dev/null || true  # with past findings
"$fuzz_cxx" "${flags[@]}" fuzz/dataset_fuzz.cpp src/data/cifar10.cpp src/data/idx.cpp \
  src/data/mapped_file.cpp src/data/dataset.cpp src/atomic_file.cpp -lz -o "$out/dataset_fuzz"
"$out/dataset_fuzz" "${run[@]}" -max_len=200000 "$out/corpus"

# The image decoders and the resize, with a pixel limit that keeps any input under ~64 MB
# (image_fuzz.cpp), which -malloc_limit_mb holds them to.
if [[ -n ${fuzz_image_libs[*]:-} ]]; then
  mkdir -p "$out/image-corpus"
  cp -n fuzz/image-corpus/* "$out/image-corpus/" 2>/dev/null || true
  "$fuzz_cxx" "${flags[@]}" fuzz/image_fuzz.cpp src/data/image_decode.cpp src/data/jpeg_decode.cpp \
    src/data/png_decode.cpp src/data/resample.cpp "${fuzz_image_libs[@]}" -o "$out/image_fuzz"
  "$out/image_fuzz" "${run[@]}" -malloc_limit_mb=128 -max_len=100000 "$out/image-corpus"
else
  echo "fuzz: no image decoder target: this build has neither TurboJPEG nor libspng"
fi

# The checkpoint target writes its own seeds (a real checkpoint and an export); Python adds a
# torch.save'd state dict, the other format the loader reads.
"$fuzz_cxx" "${flags[@]}" fuzz/checkpoint_fuzz.cpp \
  src/checkpoint/checkpoint.cpp src/checkpoint/checkpoint_files.cpp src/checkpoint/pickle_format.cpp \
  src/checkpoint/pickle_guard.cpp src/atomic_file.cpp "${fuzz_torch_libs[@]}" -o "$out/checkpoint_fuzz"
"$fuzz_python" -c 'import sys, torch; torch.manual_seed(0)
torch.save(torch.nn.Linear(3, 2).state_dict(), sys.argv[1])' \
  "$out/checkpoint-corpus/seed-python.pt"
# Leak checking is off for this one: LibTorch 1.13's PyTorchStreamReader leaks its miniz reader
# (~1.7 KB, frames only in libtorch_cpu) when its constructor throws on a bad zip.
ASAN_OPTIONS=detect_leaks=0 DDP_FUZZ_SEED_DIR="$out/checkpoint-corpus" "$out/checkpoint_fuzz" "${run[@]}" -max_len=20000 \
  "$out/checkpoint-corpus"
