#!/usr/bin/env bash
# ddp-train against the Python reference (bench/reference_ddp.py on Debian's python3-torch), same
# settings and data: 4 workers, batch 64 per worker, full-size synthetic CIFAR-format data
# (50,000 images), in turns A B A B ..., then the machine's fp32 ceiling from bench-ceiling
# against ddp-train's median images/s.
# usage: bench/compare.sh [PAIRS (3)] [STEPS per run (100)]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
steps=${2:-100}
source bench/common.sh
ensure_bench_data
echo "| pair | Python reference images/s | ddp-train images/s | ratio |"
echo "|---|---|---|---|"
ratios=()
ours=()
for ((i = 1; i <= pairs; i++)); do
  a=$(reference_images_per_second "$steps")
  b=$(ddp_train_images_per_second "$steps")
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
  ratios+=("$r")
  ours+=("$b")
  echo "| $i | $a | $b | $r |"
done
median=$(median "${ratios[@]}")
echo
echo "median ratio ddp-train / reference: $median ($pairs pairs, $steps steps of 4 x 64 images each)"
echo
build/bench-ceiling --images-per-second "$(median "${ours[@]}")"
