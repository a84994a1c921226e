#!/usr/bin/env bash
# End to end on this machine's CPUs (or its GPUs): ddp-train against PyTorch's DDP
# (bench/imagefolder_reference_ddp.py under torchrun), both training torchvision's resnet18 on
# DIR's ImageFolder (DIR/train; num_classes = its class folders) at image size 112
# (RandomResizedCrop 112, flip, ToTensor, Normalize), 2 ranks on gloo, batch 64 per rank, SGD
# lr 0.1 momentum 0.9, STEPS steps, in turns: ddp-train, PyTorch, ddp-train, PyTorch, ...
# (the model, size, ranks, batch, device and precision: the variables below).
# Per run: images/s over all ranks and rank 0's fraction of the time spent waiting for data,
# over all the steps (ddp-train's --metrics epoch record; the same fields from the reference)
# and "steady", over the steps after the first WARMUP (both sides' --step-trace files, read by
# the same code here: from the start of step WARMUP+1 to the end of the last, on the slowest
# rank). Medians of the rounds; the last line is the steady images/s ratio ddp-train / PyTorch
# as N.NNx.
#
# Alike: both normalise and flip as torchvision's ImageNet example does, and both keep each
# rank's batch statistics (ddp-train --local-batchnorm; PyTorch's SyncBatchNorm has no CPU
# implementation, and pytorch/examples' imagenet/main.py runs plain BatchNorm2d by default).
#
# usage: bench/imagefolder_e2e.sh DIR [ROUNDS (2)] [STEPS (35)]
#   DIR: an ImageFolder root with train/ of at least STEPS x RANKS x BATCH images
#        (tools/make_imagefolder.py DIR --classes 10 --train 450 --val 10 writes 4,500)
#   WARMUP=5           steps left out of the steady figures
#   WORKERS=1          the reference's DataLoader num_workers per rank
#   DDP_TRAIN_FLAGS    more ddp-train flags (its loader threads, say), split on spaces
#   REFERENCE_FLAGS    more flags of the reference (--channels-last, say)
#   RANKS=2 BATCH=64 IMAGE_SIZE=112 MODEL=resnet18 DEVICE=cpu PRECISION=fp32: both sides' (DEVICE
#                      cuda: one GPU per rank, NCCL; scripts/gpu-check.sh runs ResNet-50 so)
#   DDP_BUILD=build    where ddp-train is; DDP_PYTHON the reference Python (bench/common.sh)
set -euo pipefail
usage="usage: bench/imagefolder_e2e.sh DIR [ROUNDS] [STEPS]"
dir=$(realpath "${1:?$usage}")
cd "$(dirname "$0")/.."
source bench/common.sh
rounds=${2:-2}
steps=${3:-35}
warmup=${WARMUP:-5}
workers=${WORKERS:-1}
read -r -a extra <<<"${DDP_TRAIN_FLAGS:-}"
read -r -a reference_extra <<<"${REFERENCE_FLAGS:-}"
batch=${BATCH:-64}
ranks=${RANKS:-2}
size=${IMAGE_SIZE:-112}
model=${MODEL:-resnet18}
device=${DEVICE:-cpu}
precision=${PRECISION:-fp32}
[[ -d $dir/train ]] || { echo "imagefolder_e2e: $dir has no train/ folder" >&2; exit 2; }
[[ -x $build/ddp-train ]] || { echo "imagefolder_e2e: $build/ddp-train is missing (scripts/setup.sh builds it)" >&2; exit 2; }
((steps > warmup)) || { echo "imagefolder_e2e: STEPS must be more than WARMUP ($warmup)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# "images/s wait-fraction" over all steps, from the last epoch record of the metrics FILE.
whole() {
  local ips seconds wait
  ips=$(last_metric "$1" images_per_second)
  seconds=$(last_metric "$1" epoch_seconds)
  wait=$(last_metric "$1" data_wait_seconds)
  [[ -n $ips && -n $seconds && -n $wait ]] || { echo "imagefolder_e2e: no epoch record in $1" >&2; exit 1; }
  awk -v i="$ips" -v s="$seconds" -v w="$wait" 'BEGIN { printf "%.1f %.3f\n", i, w / s }'
}
# "images/s wait-fraction" over the steps after WARMUP, from the step traces PREFIX.RANK.csv.
steady() {
  "$python" - "$1" "$warmup" "$batch" <<'EOF'
import csv, glob, sys
prefix, warmup, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ranks = {}
for path in glob.glob(glob.escape(prefix) + ".*.csv"):
    rank = path[len(prefix) + 1:-len(".csv")]
    if rank.isdigit():
        with open(path, newline="") as f:
            rows = sorted((dict((k, float(v)) for k, v in r.items()) for r in csv.DictReader(f)),
                          key=lambda r: r["step"])
        ranks[int(rank)] = rows[warmup:]
if not ranks or 0 not in ranks or any(not rows for rows in ranks.values()):
    sys.exit(f"imagefolder_e2e: no steps after the first {warmup} in {prefix}.*.csv")
seconds = max(rows[-1]["done"] - rows[0]["start"] for rows in ranks.values())
images = sum(len(rows) for rows in ranks.values()) * batch
wait = sum(r["batch_ready"] - r["start"] for r in ranks[0])
print(f"{images / seconds:.1f} {wait / seconds:.3f}")
EOF
}
run_ours() {
  "$build/ddp-train" --dataset imagefolder --data-dir "$dir" --model "$model" --image-size "$size" \
    --device "$device" --precision "$precision" \
    --nproc-per-node "$ranks" --batch-size "$batch" --max-steps "$steps" --epochs 1 --no-eval \
    --lr 0.1 --momentum 0.9 --normalize --hflip --local-batchnorm --log-every 1000000 \
    --metrics "$out/$1.jsonl" \
    --step-trace "$out/$1" "${extra[@]}" >"$out/$1.log" 2>&1 ||
    { cat "$out/$1.log" >&2; exit 1; }
}
run_theirs() {
  "$python" -m torch.distributed.run --standalone --nproc-per-node "$ranks" \
    bench/imagefolder_reference_ddp.py --data-dir "$dir" --image-size "$size" --batch-size "$batch" \
    --model "$model" --device "$device" --precision "$precision" "${reference_extra[@]}" \
    --workers "$workers" --max-steps "$steps" --warmup-steps "$warmup" --lr 0.1 --momentum 0.9 \
    --metrics "$out/$1.jsonl" --step-trace "$out/$1" >"$out/$1.log" 2>&1 ||
    { cat "$out/$1.log" >&2; exit 1; }
}

classes=$(find -L "$dir/train" -mindepth 1 -maxdepth 1 -type d | wc -l)
# Every run takes all its steps in one epoch: fewer images would leave a few steady steps to noise.
images=$(find -L "$dir/train" -mindepth 2 -maxdepth 2 -type f | wc -l)
((images >= steps * ranks * batch)) || {
  echo "imagefolder_e2e: $dir/train has $images images, fewer than the $((steps * ranks * batch)) that $steps steps of $ranks x $batch take; write more (tools/make_imagefolder.py)" >&2
  exit 2
}
versions=$("$python" -c 'import torch, torchvision, PIL; print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, pillow {PIL.__version__}")')
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "reference: $versions, DataLoader num_workers $workers per rank${reference_extra[*]:+, flags ${reference_extra[*]}}; $("$build/ddp-train" --version 2>/dev/null | head -1)${extra[*]:+, flags ${extra[*]}}"
echo "data: $dir/train, $classes classes; $model at ${size}x$size, $precision on $device, $ranks rank(s) x batch $batch, $steps steps per run ($warmup warm-up), $rounds rounds"
echo
echo "| round | ddp-train img/s | data wait | steady img/s | steady data wait | PyTorch img/s | data wait | steady img/s | steady data wait | steady ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|"
ours_all=() ours_wait=() ours_steady=() ours_swait=() ratios=()
theirs_all=() theirs_wait=() theirs_steady=() theirs_swait=()
# Both sides' files are read before the next run starts, so a run's files never mix.
for ((r = 1; r <= rounds; r++)); do
  run_ours "ours$r"
  read -r a aw < <(whole "$out/ours$r.jsonl")
  read -r as asw < <(steady "$out/ours$r")
  run_theirs "theirs$r"
  read -r b bw < <(whole "$out/theirs$r.jsonl")
  read -r bs bsw < <(steady "$out/theirs$r")
  ratio=$(awk -v a="$as" -v b="$bs" 'BEGIN { printf "%.3f", a / b }')
  ours_all+=("$a") ours_wait+=("$aw") ours_steady+=("$as") ours_swait+=("$asw")
  theirs_all+=("$b") theirs_wait+=("$bw") theirs_steady+=("$bs") theirs_swait+=("$bsw")
  ratios+=("$ratio")
  echo "| $r | $a | $aw | $as | $asw | $b | $bw | $bs | $bsw | $ratio |"
done
echo
echo "medians of $rounds rounds (data wait: rank 0's time waiting for the next batch over the run's time)"
echo
echo "| | images/s, all steps | data wait | images/s, steady | data wait, steady |"
echo "|---|---|---|---|---|"
# The median of the values, with FORMAT: med FORMAT VALUE...
med() { awk -v v="$(median "${@:2}")" -v f="$1" 'BEGIN { printf f, v }'; }
echo "| ddp-train | $(med %.1f "${ours_all[@]}") | $(med %.3f "${ours_wait[@]}") | $(med %.1f "${ours_steady[@]}") | $(med %.3f "${ours_swait[@]}") |"
echo "| PyTorch DDP | $(med %.1f "${theirs_all[@]}") | $(med %.3f "${theirs_wait[@]}") | $(med %.1f "${theirs_steady[@]}") | $(med %.3f "${theirs_swait[@]}") |"
echo
awk -v a="$(median "${ours_steady[@]}")" -v b="$(median "${theirs_steady[@]}")" 'BEGIN { printf "%.2fx\n", a / b }'
