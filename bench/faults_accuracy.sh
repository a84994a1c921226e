#!/usr/bin/env bash
# Does a kill cost accuracy? ddp-train on the real Fashion-MNIST (Debian's dataset-fashion-mnist),
# three workers on one node, --on-failure continue, trained undisturbed and with rank 2 exiting
# at step KILL_STEP (DDP_FAULT exit) so that the two survivors finish the run; each for the seeds
# given. Prints a table of the final test accuracy, and each pair's difference against the
# spread between seeds (the noise).
# usage: bench/faults_accuracy.sh [EPOCHS [KILL_STEP [SEEDS...]]]   (defaults: 3 200 0 1)
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-3} kill_step=${2:-200}
seeds=("${@:3}")
[[ ${#seeds[@]} -eq 0 ]] && seeds=(0 1)
data=/usr/share/datasets/fashion-mnist
[[ -d $data ]] || { echo "bench/faults_accuracy.sh: needs $data (dataset-fashion-mnist)" >&2; exit 1; }

final_accuracy() { grep -o 'final [0-9.]*%' | tail -1 | tr -dc '0-9.'; }
train() { # train SEED [FAULT]: the final test accuracy
  CUDA_VISIBLE_DEVICES= DDP_FAULT=${2:-} build/ddp-train --dataset fashion-mnist --data-dir "$data" \
    --epochs "$epochs" --seed "$1" --nproc-per-node 3 --on-failure continue 2>&1 | final_accuracy
}

printf '%-6s %14s %20s %12s\n' seed undisturbed "rank 2 lost at $kill_step" difference
for seed in "${seeds[@]}"; do
  plain=$(train "$seed")
  killed=$(train "$seed" "exit@$kill_step:2")
  printf '%-6s %13s%% %19s%% %11s\n' "$seed" "$plain" "$killed" \
    "$(awk -v a="$killed" -v b="$plain" 'BEGIN { printf "%+.2f", a - b }')"
done
