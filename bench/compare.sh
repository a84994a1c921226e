#!/usr/bin/env bash
# ddp-train against the Python reference (bench/reference_ddp.py on the build's reference
# Python: .venv's torch by default), same settings and data: 4 workers, batch 64 per worker, full-size synthetic CIFAR-format data
# (50,000 images), in turns A B A B ..., each pair followed by the machine's fp32 ceiling
# (bench-ceiling) and ddp-train's fraction of it then: this VM's speed drifts by tens of percent
# over minutes, so a ceiling measured once, minutes away from a run, says little about it. The
# full ceiling table, for ddp-train's median images/s, ends the output.
# usage: bench/compare.sh [PAIRS (3)] [STEPS per run (100)]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
steps=${2:-100}
source bench/common.sh
ensure_bench_data
echo "| pair | Python reference images/s | ddp-train images/s | ratio | / ceiling right after, direct FLOPs | / ceiling, multiplies executed |"
echo "|---|---|---|---|---|---|"
ratios=()
ours=()
fractions=()
executed=()
for ((i = 1; i <= pairs; i++)); do
  a=$(reference_images_per_second "$steps")
  b=$(ddp_train_images_per_second "$steps")
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
  ceiling=$("$build/bench-ceiling" --images-per-second "$b")
  c=$(sed -n 's/^| achieved at .* = \([0-9.]*\)% of the ceiling.*/\1/p' <<<"$ceiling")
  # Where conv2 runs by Winograd the table has a line counting its real multiplies too.
  e=$(sed -n 's/^| achieved, counting the multiplies .* = \([0-9.]*\)% of the ceiling.*/\1/p' <<<"$ceiling")
  e=${e:-$c}
  ratios+=("$r")
  ours+=("$b")
  fractions+=("$c")
  executed+=("$e")
  echo "| $i | $a | $b | $r | $c% | $e% |"
done
median=$(median "${ratios[@]}")
echo
echo "median ratio ddp-train / reference: $median ($pairs pairs, $steps steps of 4 x 64 images each)"
echo "median fraction of the ceiling measured right after each pair: $(median "${fractions[@]}")% in a direct convolution's FLOPs, $(median "${executed[@]}")% in the multiplies executed"
echo
"$build/bench-ceiling" --images-per-second "$(median "${ours[@]}")"
