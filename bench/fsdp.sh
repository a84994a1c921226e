#!/usr/bin/env bash
# ddp.cpp's FullyShardedDataParallel against PyTorch's fully_shard (FSDP2, eager) training the
# same GPT on the same tokens, 2 ranks of 1 thread on Gloo, in turns: gpt-nano at a context of
# 256, and gpt2's width and depth (768, 12 layers) at 128. Per run: steady tokens/s (the steps
# after the first 2), and per rank the bytes of parameters + gradients + optimizer state (what
# sharding divides) and the peak resident memory; the ratio ddp.cpp / PyTorch last.
# The reference is bench/nanogpt_reference.py: nanoGPT's model and train.py. With PARALLEL ddp,
# the same race between the two DDPs (nanoGPT-style PyTorch DDP, eager).
# usage: bench/fsdp.sh [TURNS (3)] [STEPS timed per run (8)] [PARALLEL: fsdp (default) or ddp]
set -euo pipefail
cd "$(dirname "$0")/.."
turns=${1:-3}
steps=${2:-8}
parallel=${3:-fsdp}
[[ $parallel == fsdp || $parallel == ddp ]] || { echo "PARALLEL: fsdp or ddp, not $parallel" >&2; exit 2; }
peer=$([[ $parallel == fsdp ]] && echo "PyTorch FSDP2" || echo "PyTorch DDP")
source bench/common.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$build/ddp-train" make-data --tokens /usr/share/common-licenses/GPL-3 --out "$out/tokens" >/dev/null

# name model layers heads width context batch
configs=("gpt-nano gpt-nano 6 6 384 256 4" "gpt2-width gpt2 12 12 768 128 2")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

echo "| model | turn | $peer tokens/s | ddp.cpp ${parallel^^} tokens/s | ratio | state MiB/rank PyTorch | ddp.cpp | peak RSS MiB/rank PyTorch | ddp.cpp |"
echo "|---|---|---|---|---|---|---|---|---|"
summary=()
for config in "${configs[@]}"; do
  read -r name model layers heads width context batch <<<"$config"
  ratios=()
  for ((t = 1; t <= turns; t++)); do
    OMP_NUM_THREADS=1 "$python" bench/nanogpt_reference.py --data-dir "$out/tokens" \
      --n-layer "$layers" --n-head "$heads" --n-embd "$width" --block-size "$context" \
      --vocab-size 256 --batch-size "$batch" --steps "$steps" --lr 1e-3 --min-lr 1e-4 \
      --warmup-steps 2 --parallel "$parallel" --nproc 2 --port "$(free_port)" --bench \
      --out "$out/reference.jsonl" >/dev/null 2>&1
    ref_tps=$(printf "%.1f" "$(last_metric "$out/reference.jsonl" tokens_per_s)")
    ref_state=$(last_metric "$out/reference.jsonl" state_bytes_per_rank)
    ref_rss=$(last_metric "$out/reference.jsonl" peak_rss_bytes_per_rank)
    rm -f "$out/ours.jsonl"
    OMP_NUM_THREADS=1 MASTER_PORT=$(free_port) "$build/ddp-train" --model "$model" \
      --dataset tokens --data-dir "$out/tokens" --block-size "$context" --batch-size "$batch" \
      --steps $((steps + 2)) --optimizer adamw --lr 1e-3 --min-lr 1e-4 --warmup-steps 2 \
      --lr-schedule cosine --weight-decay 0.1 --parallel "$parallel" --nproc-per-node 2 \
      --eval-every 0 --eval-batches 1 --log-every 1000000 --metrics "$out/ours.jsonl" >/dev/null
    ours_tps=$(awk -F'[:,}]' '/"step_seconds"/ {
        for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i + 1); if ($i ~ /"tokens"$/) n = $(i + 1);
                                   if ($i ~ /"step_seconds"$/) d = $(i + 1) }
        if (s >= 2) { tokens += n; seconds += d } } END { printf "%.1f", tokens / seconds }' "$out/ours.jsonl")
    ours_state=$(last_metric "$out/ours.jsonl" state_bytes_per_rank)
    ours_rss=$(last_metric "$out/ours.jsonl" peak_rss_bytes_per_rank)
    r=$(awk -v a="$ref_tps" -v b="$ours_tps" 'BEGIN { printf "%.3f", b / a }')
    ratios+=("$r")
    echo "| $name | $t | $ref_tps | $ours_tps | $r | $(mib "$ref_state") | $(mib "$ours_state") | $(mib "$ref_rss") | $(mib "$ours_rss") |"
  done
  summary+=("$name: median tokens/s ratio ddp.cpp / $peer $(median "${ratios[@]}") ($turns turns, $steps timed steps of 2 x $batch x $context tokens)")
done
echo
printf '%s\n' "${summary[@]}"
