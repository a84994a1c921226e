#!/usr/bin/env bash
# Six fixed ddp-train runs whose final weights fingerprints (every rank's) and last test lines
# must not change when the code is reshaped without meaning to change behaviour: run it on the
# build before and after, and compare the two outputs with diff.
#
# usage: scripts/fingerprints.sh [DDP_TRAIN] > fingerprints.txt
#   DDP_TRAIN  the ddp-train to run (default build/ddp-train)
set -euo pipefail
cd "$(dirname "$0")/.."
ddp_train=${1:-build/ddp-train}
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
"$ddp_train" make-data --out "$data" --train 2000 --test 500 >/dev/null

runs=(
  "--nproc-per-node 2"
  "--nproc-per-node 2 --optimizer adam --zero --lr-schedule cosine --warmup-epochs 0.5"
  "--nproc-per-node 2 --model resnet --comm-hook powersgd:1:3 --batch-size 32"
  "--nproc-per-node 3 --no-pad --batch-size 111 --max-steps 100"
  "--nproc-per-node 2 --preset fast --random-crop"
  "--nproc-per-node 2 --lockstep-baseline"
)
for i in "${!runs[@]}"; do
  # --max-steps given twice: the later (run 4's 100) wins.
  # shellcheck disable=SC2086
  output=$(CUDA_VISIBLE_DEVICES= "$ddp_train" --data-dir "$data" --epochs 2 --max-steps 12 \
    --log-every 5 ${runs[i]} 2>&1) || { echo "run $((i + 1)) failed:"; echo "$output"; exit 1; }
  echo "run $((i + 1)): ${runs[i]}"
  grep -oE 'rank [0-9]+: final weights fingerprint [0-9a-f]+' <<<"$output" | sort
  # Each epoch's losses and accuracy (not its seconds and images/s, which vary).
  awk '/^\[rank 0\] +[0-9]+ / { print "  epoch", $3, $4, $5, $6 }' <<<"$output"
done
