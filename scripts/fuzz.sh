#!/usr/bin/env bash
# Builds the libFuzzer target for the data set readers with clang (ASan + UBSan) and runs it for
# a bounded time. usage: scripts/fuzz.sh [SECONDS (30)] [OUTPUT DIR (build/fuzz)]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
out=${2:-build/fuzz}
mkdir -p "$out/corpus"
cp -n fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc fuzz/dataset_fuzz.cpp src/data/cifar10.cpp src/data/idx.cpp src/data/mapped_file.cpp \
  src/data/dataset.cpp src/atomic_file.cpp -lz -o "$out/dataset_fuzz"
# -rss_limit_mb bounds what one input may allocate; -timeout bounds one input's time.
"$out/dataset_fuzz" -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=10 -max_len=200000 \
  -print_final_stats=1 "$out/corpus"
