#!/usr/bin/env bash
# DDP overhead: 2 workers x 1 thread training with DDP against the same two processes training
# without any gradient communication (--no-sync-baseline), same batch, in turns. Times are rank
# 0's training seconds from --metrics; the step-time breakdown of the last pair follows.
# usage: bench/ddp_overhead.sh [PAIRS (5)] [STEPS (100)] [ddp-train flags for both...]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5}
steps=${2:-100}
shift $(($# < 2 ? $# : 2))
source bench/common.sh
ensure_bench_data
data=$bench_data
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Trains once; the metrics' epoch record lands in $out/$1.jsonl.
run() {
  local name=$1
  shift
  rm -f "$out/$name.jsonl"
  build/ddp-train --nproc-per-node 2 --threads 1 --data-dir "$data" --epochs 1 --max-steps "$steps" \
    --no-eval --log-every 1000000 --metrics "$out/$name.jsonl" "$@" >/dev/null
}
# The value of KEY in run NAME's epoch record: value NAME KEY.
value() { last_metric "$out/$1.jsonl" "$2"; }

echo "| pair | with DDP s | without communication s | overhead |"
echo "|---|---|---|---|"
ratios=()
for ((i = 1; i <= pairs; i++)); do
  run ddp "$@"
  run baseline --no-sync-baseline "$@"
  a=$(value ddp epoch_seconds)
  b=$(value baseline epoch_seconds)
  ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')")
  awk -v i="$i" -v a="$a" -v b="$b" 'BEGIN { printf "| %d | %.3f | %.3f | %+.1f%% |\n", i, a, b, 100 * (a / b - 1) }'
done
median=$(awk -v m="$(median "${ratios[@]}")" 'BEGIN { printf "%+.1f%%", 100 * (m - 1) }')
echo
echo "median DDP overhead: $median ($pairs pairs, $steps steps of 2 x 64 images)"
echo
echo "step time on rank 0, last pair (ms per step):"
echo "| run | data wait | forward | backward | exposed communication | optimizer |"
echo "|---|---|---|---|---|---|"
for name in ddp baseline; do
  printf "| %s |" "$name"
  for key in data_wait_seconds forward_seconds backward_seconds comm_exposed_seconds optimizer_seconds; do
    awk -v s="$(value "$name" "$key")" -v n="$steps" 'BEGIN { printf " %.2f |", 1000 * s / n }'
  done
  echo
done
