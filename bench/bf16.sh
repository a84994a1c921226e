#!/usr/bin/env bash
# --precision bf16 against the Python reference's fp32: training images/s with the reference
# settings (4 workers, batch 64, full-size synthetic CIFAR-format data), the Python reference,
# ddp-train fp32 and ddp-train bf16 in turns; then test accuracy after EPOCHS epochs of the real
# Fashion-MNIST, fp32 against bf16 (4 workers, the reference recipe, same seed); last, what
# bounds bf16 on this machine (bench-ceiling --bf16): its bf16 GEMM rate and one core's bf16
# dot-product peak against fp32's, and the images/s no bf16 implementation of Net can beat, as a
# ratio to the Python reference's median.
# usage: bench/bf16.sh [PAIRS (3)] [STEPS per run (60)] [EPOCHS (2)]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
steps=${2:-60}
epochs=${3:-2}
source bench/common.sh
ensure_bench_data
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "| turn | Python reference fp32 images/s | ddp-train fp32 images/s | ddp-train bf16 images/s | bf16 / reference |"
echo "|---|---|---|---|---|"
ratios=()
references=()
for ((i = 1; i <= pairs; i++)); do
  a=$(reference_images_per_second "$steps")
  references+=("$a")
  b=$(ddp_train_images_per_second "$steps")
  c=$(ddp_train_images_per_second "$steps" --precision bf16)
  r=$(awk -v a="$a" -v c="$c" 'BEGIN { printf "%.3f", c / a }')
  ratios+=("$r")
  echo "| $i | $a | $b | $c | $r |"
done
echo
echo "median ratio ddp-train bf16 / Python reference fp32: $(median "${ratios[@]}") ($pairs turns, $steps steps of 4 x 64 images each)"
echo

echo "| Fashion-MNIST, $epochs epochs, 4 workers | test accuracy | images/s |"
echo "|---|---|---|"
for precision in fp32 bf16; do
  "$build/ddp-train" --nproc-per-node 4 --dataset fashion-mnist --epochs "$epochs" \
    --precision "$precision" --log-every 1000000 --metrics "$out/$precision.jsonl" >/dev/null
  awk -v p="$precision" -v a="$(last_metric "$out/$precision.jsonl" test_acc)" \
    -v s="$(last_metric "$out/$precision.jsonl" images_per_second)" \
    'BEGIN { printf "| %s | %.2f%% | %.0f |\n", p, 100 * a, s }'
done
awk -v a="$(last_metric "$out/fp32.jsonl" test_acc)" -v b="$(last_metric "$out/bf16.jsonl" test_acc)" \
  'BEGIN { printf "\nbf16 - fp32 test accuracy: %+.2f points\n", 100 * (b - a) }'
# Whether this CPU multiplies bf16 faster than fp32 at all: what bounds bf16's gain.
echo
ceiling=$("$build/bench-ceiling" --bf16)
grep -E '^\|( measure|---| ceiling| bf16 | one core)' <<<"$ceiling"
bound=$(sed -n 's/^| bf16 images\/s ceiling .* | \([0-9.]*\) |$/\1/p' <<<"$ceiling")
reference=$(median "${references[@]}")
awk -v b="$bound" -v r="$reference" 'BEGIN { printf "\nbf16 can reach at most %.0f images/s here: %.2fx the median of the Python reference (%.0f images/s)\n", b, b / r, r }'
