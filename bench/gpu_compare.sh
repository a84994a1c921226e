#!/usr/bin/env bash
# ddp-train against PyTorch running the reference program (bench/reference_ddp.py) on the same
# GPU, one process each, on the same full-size synthetic CIFAR-format data: batch 64 and 512,
# fp32 and bf16 (autocast). Each run trains EPOCHS epochs without evaluation and reports the last
# one's images/s, so that start-up (CUDA context, cuDNN's choices) is left out of the figure. The
# two programs take turns, configuration by configuration, ROUNDS times; the table ends with the
# median ratio per configuration.
# usage: bench/gpu_compare.sh [ROUNDS (1)] [EPOCHS (2)] [MAX_STEPS per epoch (all)]
#   DDP_BUILD            the build (default build)
#   GPU_COMPARE_DEVICE   cuda (default), or cpu to rehearse the script on a machine without a GPU
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
epochs=${2:-2}
max_steps=${3:-0}
device=${GPU_COMPARE_DEVICE:-cuda}
limit=()
((max_steps > 0)) && limit=(--max-steps "$max_steps")
source bench/common.sh
ensure_bench_data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

reference() {  # BATCH PRECISION
  "$python" bench/reference_ddp.py --data-dir "$bench_data" --world-size 1 --device "$device" \
    --batch-size "$1" --precision "$2" --epochs "$epochs" "${limit[@]}" --no-eval \
    --port "$(free_port)" \
    2>"$tmp/err" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p' | tail -1
}
ours() {  # BATCH PRECISION
  "$build/ddp-train" --data-dir "$bench_data" --device "$device" --batch-size "$1" \
    --precision "$2" --epochs "$epochs" "${limit[@]}" --no-eval --log-every 1000000 \
    --metrics "$tmp/m.jsonl" >/dev/null 2>"$tmp/err"
  awk '{ printf "%.1f", $1 }' <<<"$(last_metric "$tmp/m.jsonl" images_per_second)"
  local key phases="batch $1 $2:"
  for key in epoch_seconds data_wait_seconds forward_seconds backward_seconds optimizer_seconds; do
    phases+=" ${key%_seconds} $(last_metric "$tmp/m.jsonl" "$key")"
  done
  echo "$phases" >>"$tmp/phases"
}
measured() {  # what a run printed, or why it has no figure
  if [[ -n $1 ]]; then echo "$1"; else echo "failed: $(tail -1 "$tmp/err")"; fi
}

echo "| round | batch | precision | PyTorch images/s | ddp-train images/s | ratio |"
echo "|---|---|---|---|---|---|"
declare -A ratios
for ((round = 1; round <= rounds; round++)); do
  for batch in 64 512; do
    for precision in fp32 bf16; do
      a=$(reference "$batch" "$precision" || true)
      a_text=$(measured "$a")
      b=$(ours "$batch" "$precision" || true)
      b_text=$(measured "$b")
      r=-
      if [[ -n $a && -n $b ]]; then
        r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')
        ratios[$batch-$precision]+="$r "
      fi
      echo "| $round | $batch | $precision | $a_text | $b_text | $r |"
    done
  done
done
echo
for key in 64-fp32 64-bf16 512-fp32 512-bf16; do
  # shellcheck disable=SC2086  # the ratios are words
  [[ -n ${ratios[$key]:-} ]] && echo "batch ${key%-*} ${key#*-}: median ratio $(median ${ratios[$key]})"
done
echo
echo "ddp-train's last epoch, seconds (on a GPU the phases are the host's time to queue them):"
cat "$tmp/phases"
echo "($device: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); $("$build/ddp-train" --version | head -1); PyTorch $("$python" -c 'import torch; print(torch.__version__)'))"
