#!/usr/bin/env bash
# DDP overhead: 2 workers x 1 thread training with DDP against the same two processes training
# without any gradient communication (--no-sync-baseline), same batch, in turns.
# usage: bench/ddp_overhead.sh [PAIRS (4)] [STEPS (80)]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-4}
steps=${2:-80}
source bench/common.sh
ensure_bench_data
data=$bench_data
seconds() {  # the epoch's training seconds reported by rank 0
  build/ddp-train --nproc-per-node 2 --threads 1 --data-dir "$data" --epochs 1 --max-steps "$steps" \
    --no-eval --log-every 1000000 "$@" | sed -n 's/.*epoch 1\/1 .*  \([0-9.]*\) s .*/\1/p'
}
echo "| pair | with DDP s | without communication s | overhead |"
echo "|---|---|---|---|"
ratios=()
for ((i = 1; i <= pairs; i++)); do
  a=$(seconds)
  b=$(seconds --no-sync-baseline)
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%+.1f%%", 100 * (a / b - 1) }')
  ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')")
  echo "| $i | $a | $b | $r |"
done
median=$(awk -v m="$(median "${ratios[@]}")" 'BEGIN { printf "%+.1f%%", 100 * (m - 1) }')
echo
echo "median DDP overhead: $median ($pairs pairs, $steps steps of 2 x 64 images)"
