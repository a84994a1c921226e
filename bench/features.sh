#!/usr/bin/env bash
# The features beyond PyTorch's DDP side by side on Fashion-MNIST (2 workers): per configuration
# the bytes handed to the collectives per step, images/s, rank 0's optimizer state and the test
# accuracy after EPOCHS epochs.
# usage: bench/features.sh [EPOCHS (2)] [MAX_STEPS (0: whole epochs)]
#   bench/features.sh 2        accuracy after 2 epochs for each (about 40 minutes here)
#   bench/features.sh 1 100    a quick look at bytes, speed and memory (accuracy meaningless)
#   DDP_TRAIN=path             the ddp-train to measure (default build/ddp-train)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
epochs=${1:-2}
max_steps=${2:-0}
train=${DDP_TRAIN:-build/ddp-train}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

configs=(
  "allreduce (plain DDP)|"
  "fp16 compression|--comm-hook fp16"
  "bf16 compression|--comm-hook bf16"
  "PowerSGD rank 2|--comm-hook powersgd:2"
  "Adam, unsharded|--optimizer adam --lr 0.001"
  "Adam, ZeRO (--zero)|--optimizer adam --lr 0.001 --zero"
  "--no-pad (Join)|--no-pad"
  "--preset fast|--preset fast"
  "ResNet + SyncBatchNorm, --preset fast|--model resnet --preset fast"
)

echo "| configuration | bytes communicated / step | images/s | optimizer state MB (rank 0) | test accuracy |"
echo "|---|---|---|---|---|"
i=0
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  i=$((i + 1))
  steps=()
  ((max_steps > 0)) && steps=(--max-steps "$max_steps")
  # shellcheck disable=SC2086 # flags are words
  "$train" --nproc-per-node 2 --dataset fashion-mnist --epochs "$epochs" "${steps[@]}" \
    --log-every 1000000 --metrics "$out/$i.jsonl" $flags >"$out/$i.log" 2>&1 ||
    { echo "| $name | failed: $(tail -1 "$out/$i.log") | | | |"; continue; }
  printf '| %s | %s | %s | %s | %s%% |\n' "$name" "$(last_metric "$out/$i.jsonl" comm_bytes_per_step)" \
    "$(last_metric "$out/$i.jsonl" images_per_second | awk '{ printf "%.0f", $1 }')" \
    "$(last_metric "$out/$i.jsonl" optimizer_state_mb | awk '{ printf "%.2f", $1 }')" \
    "$(last_metric "$out/$i.jsonl" test_acc | awk '{ printf "%.2f", 100 * $1 }')"
done
echo
echo "(2 workers, batch 64 per worker, $epochs epoch(s)$( ((max_steps > 0)) && echo " of $max_steps steps"))"
