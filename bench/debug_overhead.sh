#!/usr/bin/env bash
# What the debugging aids cost: ddp-train's images/s (2 workers x 1 thread, batch 64, full-size
# CIFAR-format data) with the flight recorder off (DDP_FLIGHT_RECORDS=0), as it runs by default
# (the recorder keeps the last 2000 collectives), with --debug-dir (records written only when
# the job fails), --trace and --debug-collectives; in turns, each configuration once a turn in
# rotating order, so drift on this VM falls on all of them alike. The ratio is against the
# recorder-off run of the same turn, median over the turns. With DDP_TRAIN_BEFORE=PATH, a
# ddp-train built from an earlier commit runs in each turn too ("before"), and a last column
# gives each configuration's median ratio to it: whether anything else changed the speed.
# usage: bench/debug_overhead.sh [TURNS (5)] [STEPS (150)]
set -euo pipefail
cd "$(dirname "$0")/.."
turns=${1:-5}
steps=${2:-150}
source bench/common.sh
ensure_bench_data
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

names=("recorder off" "default" "--debug-dir" "--trace" "--debug-collectives")
flags=("" "" "--debug-dir $out/debug" "--trace $out/t.json" "--debug-collectives")
envs=("DDP_FLIGHT_RECORDS=0" "" "" "" "")
trains=("$build/ddp-train" "$build/ddp-train" "$build/ddp-train" "$build/ddp-train" "$build/ddp-train")
if [[ -n ${DDP_TRAIN_BEFORE:-} ]]; then
  names+=("before")
  flags+=("")
  envs+=("")
  trains+=("$DDP_TRAIN_BEFORE")
fi
n=${#names[@]}

# Trains once and prints images/s: run INDEX.
run() {
  local i=$1
  rm -f "$out/m.jsonl"
  # shellcheck disable=SC2086 # flags and environment are words
  env ${envs[$i]} "${trains[$i]}" --nproc-per-node 2 --threads 1 --data-dir "$bench_data" \
    --epochs 1 --max-steps "$steps" --no-eval --log-every 1000000 --metrics "$out/m.jsonl" \
    ${flags[$i]} >/dev/null
  last_metric "$out/m.jsonl" images_per_second
}

declare -A ips
for ((t = 1; t <= turns; t++)); do
  for ((k = 0; k < n; k++)); do
    i=$(((k + t) % n))
    ips[$t,$i]=$(run "$i")
  done
done

header="| configuration |"
rule="|---|"
for ((t = 1; t <= turns; t++)); do
  header+=" turn $t img/s |"
  rule+="---|"
done
echo "$header median ratio to recorder off | median ratio to before |"
echo "$rule---|---|"
for ((i = 0; i < n; i++)); do
  row="| ${names[$i]} |"
  ratios=()
  for ((t = 1; t <= turns; t++)); do
    row+=" $(printf '%.0f' "${ips[$t,$i]}") |"
    ratios+=("$(awk -v a="${ips[$t,$i]}" -v b="${ips[$t,0]}" 'BEGIN { print a / b }')")
  done
  before="-"
  if [[ -n ${DDP_TRAIN_BEFORE:-} ]]; then
    vs=()
    for ((t = 1; t <= turns; t++)); do
      vs+=("$(awk -v a="${ips[$t,$i]}" -v b="${ips[$t,$((n - 1))]}" 'BEGIN { print a / b }')")
    done
    before=$(awk -v m="$(median "${vs[@]}")" 'BEGIN { printf "%.3f", m }')
  fi
  echo "$row $(awk -v m="$(median "${ratios[@]}")" 'BEGIN { printf "%.3f", m }') | $before |"
done
echo
echo "($turns turns of $steps steps, 2 workers x 1 thread, batch 64 per worker; $(git rev-parse --short HEAD))"
