#!/usr/bin/env bash
# Writes the checkpoint that CheckpointTest.CheckpointFromLibTorch113ResumesHere loads: one epoch
# of Net on a small synthetic data set, trained by a ddp-train built against Debian 12's LibTorch
# 1.13 (scripts/fresh-root.sh --libtorch debian --keep; then this script inside that root), and
# the test accuracy that build measured. Its output is committed in tests/compat/.
# usage: tests/compat/write_checkpoint_fixture.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$1
out=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The same data set the test makes (make-data is deterministic for a seed).
"$build/ddp-train" make-data --out "$work/data" --train 256 --test 64 --seed 7 >/dev/null
"$build/ddp-train" --data-dir "$work/data" --epochs 1 --threads 1 --checkpoint-dir "$work/ck" \
  --metrics "$work/m.jsonl" >"$work/log"
version=$("$build/ddp-train" --version | sed -n 's/.*LibTorch \([0-9.]*\).*/\1/p')
mkdir -p "$out"
cp "$work/ck/checkpoint-epoch-0001.pt" "$out/checkpoint-libtorch-$version.pt"
# The last epoch record's test accuracy, as a fraction.
sed -n 's/.*"test_acc": \([0-9.e+-]*\).*/\1/p' "$work/m.jsonl" | tail -1 >"$out/checkpoint-libtorch-$version.test_acc"
echo "wrote $out/checkpoint-libtorch-$version.pt ($(cat "$out/checkpoint-libtorch-$version.test_acc"))"
