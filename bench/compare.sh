#!/usr/bin/env bash
# ddp-train against the Python reference (bench/reference_ddp.py on Debian's python3-torch), same
# settings and data: 4 workers, batch 64 per worker, full-size synthetic CIFAR-format data
# (50,000 images), in turns A B A B ..., then the machine's fp32 ceiling from bench-ceiling.
# usage: bench/compare.sh [PAIRS (3)] [STEPS per run (100)]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
steps=${2:-100}
source bench/common.sh
ensure_bench_data
data=$bench_data
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

ref_run() {
  /usr/bin/python3 bench/reference_ddp.py --data-dir "$data" --world-size 4 --threads 1 --epochs 1 \
    --max-steps "$steps" --no-eval --port "$(port)" 2>/dev/null | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p'
}
cpp_run() {
  build/ddp-train --nproc-per-node 4 --data-dir "$data" --epochs 1 --max-steps "$steps" --no-eval \
    --log-every 1000000 | sed -n 's/.*epoch 1\/1 .* \([0-9.]*\) img\/s.*/\1/p'
}

echo "| pair | Python reference images/s | ddp-train images/s | ratio |"
echo "|---|---|---|---|"
ratios=()
last_cpp=0
for ((i = 1; i <= pairs; i++)); do
  a=$(ref_run)
  b=$(cpp_run)
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
  ratios+=("$r")
  last_cpp=$b
  echo "| $i | $a | $b | $r |"
done
median=$(median "${ratios[@]}")
echo
echo "median ratio ddp-train / reference: $median ($pairs pairs, $steps steps of 4 x 64 images each)"
echo
build/bench-ceiling --images-per-second "$last_cpp"
