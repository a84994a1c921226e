#!/usr/bin/env bash
# This build (LibTorch from PyPI by default) against the same tree built on Debian 12's LibTorch
# 1.13 in a root that `scripts/fresh-root.sh --libtorch debian --keep` left, in turns A B A B ...:
# ddp-train with the reference settings (4 workers, batch 64, full-size synthetic CIFAR-format
# data), images/s per turn and where a step's time goes (each rank's --step-trace, steps 6 on).
# usage: bench/versions.sh ROOT [TURNS (5)] [STEPS per run (150)] [ddp-train flags...]
# Needs root (chroot, mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:?usage: bench/versions.sh ROOT [TURNS] [STEPS] [flags...] (ROOT: a kept fresh root)}
turns=${2:-5}
steps=${3:-150}
shift $(($# < 3 ? $# : 3))
[[ -x $root/src/ddp.cpp/build/ddp-train ]] ||
  { echo "versions: no build in $root/src/ddp.cpp (make one: scripts/fresh-root.sh --libtorch debian --keep)" >&2; exit 2; }
source bench/common.sh
ensure_bench_data
out=$(mktemp -d)
mounts=()
cleanup() {
  local m
  for m in "${mounts[@]}"; do umount -l "$m" || true; done
  rm -rf "$out"
}
trap cleanup EXIT
# What the runs need inside the root: /proc, /dev (shared memory) and the host's data, read-only.
for m in proc dev dev/shm data; do
  mkdir -p "$root/$m"
  src=/$m
  [[ $m == data ]] && src=$(readlink -f "$bench_data")
  mount --bind "$src" "$root/$m"
  mounts=("$root/$m" "${mounts[@]}")
done
mkdir -p "$root/$out"
mounts=("$root/$out" "${mounts[@]}")
mount --bind "$out" "$root/$out"

args=(--nproc-per-node 4 --epochs 1 --max-steps "$steps" --no-eval --log-every 1000000 "$@")
images_per_second() { sed -n 's/.*epoch 1\/1 .* \([0-9.]*\) img\/s.*/\1/p'; }
theirs=$(chroot "$root" /src/ddp.cpp/build/ddp-train --version | head -1)
ours=$("$build/ddp-train" --version | head -1)
echo "A: $ours (this build); B: $theirs (in $root)"
echo
echo "| turn | A images/s | B images/s | A / B |"
echo "|---|---|---|---|"
ratios=()
for ((i = 1; i <= turns; i++)); do
  a=$("$build/ddp-train" --data-dir "$bench_data" "${args[@]}" --step-trace "$out/a$i" | images_per_second)
  b=$(chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin \
    /src/ddp.cpp/build/ddp-train --data-dir /data "${args[@]}" --step-trace "$out/b$i" | images_per_second)
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
  ratios+=("$r")
  echo "| $i | $a | $b | $r |"
done
echo
echo "median A / B: $(median "${ratios[@]}") ($turns turns, $steps steps of 4 x 64 images each)"
echo
echo "| build | forward ms | backward ms | waiting for the all-reduce ms | optimizer ms | step ms |"
echo "|---|---|---|---|---|---|"
for build_label in a:A b:B; do
  cat "$out/${build_label%%:*}"*.csv | awk -F, -v label="${build_label#*:}" '
    $1 == "1" && $2 >= 6 { n++; f += $5 - $4; b += $6 - $5; w += $7 - $6; o += $8 - $7; t += $8 - $3 }
    END { printf "| %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", label, f / n * 1e3, b / n * 1e3, w / n * 1e3, o / n * 1e3, t / n * 1e3 }'
done
echo "(per rank and step, mean over the ranks and turns, from step 6 on)"
