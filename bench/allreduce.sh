#!/usr/bin/env bash
# The process group's all-reduce (bench-allreduce: latency, algbw, busbw for 4 KiB to 64 MiB)
# on loopback, then between two network namespaces joined by a veth pair shaped to RATE, one rank
# on each; there, busbw for >= 16 MiB against RATE, and a DDP step's exposed (not overlapped)
# communication against the ring lower bound 2(n-1)/n x gradient bytes / RATE.
# usage: bench/allreduce.sh [RATE in mbit or gbit (1gbit)] [loopback ranks (2)]   (root for netns)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
rate=${1:-1gbit}
nproc=${2:-2}
case $rate in
  *gbit) rate_bits=$(awk -v r="${rate%gbit}" 'BEGIN { print r * 1e9 }') ;;
  *mbit) rate_bits=$(awk -v r="${rate%mbit}" 'BEGIN { print r * 1e6 }') ;;
  *) echo "bench/allreduce.sh: RATE must look like 1gbit or 500mbit, not '$rate'" >&2; exit 2 ;;
esac
unprefix() { sed 's/^\[rank 0\] //'; }

echo "## loopback, $nproc ranks"
echo
"$build/ddprun" --nproc-per-node "$nproc" --rank0-only -- "$build/bench-allreduce" | unprefix

source scripts/lib/netns.sh
if ! netns_pair_available; then
  echo "(skipping the shaped link: network namespaces need root and iproute2)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'netns_pair_down; rm -rf "$tmp"' EXIT
netns_pair_up "$rate"

# Runs PROGRAM ARGS... as one worker on each "host"; rank 0's output goes to $tmp/a.log.
two_hosts() {
  if ! netns_run_two_nodes 900 "$build/ddprun" "$tmp/a.log" "$tmp/b.log" --master-port 29561 \
    --nproc-per-node 1 --rank0-only -- "$@"; then
    cat "$tmp/a.log" "$tmp/b.log" >&2
    echo "bench/allreduce.sh: a host failed (exit $netns_rc_a, $netns_rc_b)" >&2
    exit 1
  fi
}

echo
echo "## two namespaces over a veth pair shaped to $rate (tbf), 1 rank each"
echo
two_hosts "$build/bench-allreduce"
unprefix <"$tmp/a.log" | tee "$tmp/table.md"
awk -F'|' -v bits="$rate_bits" '
  $2 ~ /MiB/ && ($2 + 0) >= 16 { printf "\nbusbw at %s: %.2f Gbit/s = %.1f%% of the shaped rate\n", $2, $6, 100 * $6 * 1e9 / bits }
' "$tmp/table.md"

echo
echo "## a DDP step over the same link (ddp-train, Net, batch 64 per rank, 100 steps)"
echo
"$build/ddp-train" make-data --out "$tmp/data" --train 12800 --test 100 >/dev/null
two_hosts "$build/ddp-train" --data-dir "$tmp/data" --epochs 1 --max-steps 100 --no-eval --threads 1 \
  --metrics "$tmp/metrics.jsonl" --log-every 1000000
"$python" - "$tmp/metrics.jsonl" "$rate_bits" <<'PY'
import json, sys
epoch = [r for r in map(json.loads, open(sys.argv[1])) if "train_images" in r][-1]
rate_bytes = float(sys.argv[2]) / 8
n = 2
steps = epoch["train_images"] / (64 * n)  # train_images counts every rank's images
grad = epoch["comm_bytes_per_step"]
bound = 2 * (n - 1) / n * grad / rate_bytes
exposed = epoch["comm_exposed_seconds"] / steps
step = epoch["epoch_seconds"] / steps
print("| gradient bytes per step | ring lower bound | exposed communication | step time |")
print("|---:|---:|---:|---:|")
print(f"| {grad:,.0f} | {bound * 1e3:.1f} ms | {exposed * 1e3:.1f} ms ({exposed / bound:.2f}x the bound) | {step * 1e3:.1f} ms |")
PY
