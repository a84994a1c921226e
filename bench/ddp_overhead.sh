#!/usr/bin/env bash
# DDP overhead: 2 workers x 1 thread training with DDP against the same two processes training
# without any gradient communication (--no-sync-baseline), same batch, in turns. A third run in
# each turn keeps the ranks in step without moving gradients (--lockstep-baseline: an all-reduce
# of one float after every backward), to tell what DDP itself costs from what waiting for the
# slower rank costs. Times are the job's training seconds from --metrics; the step-time breakdown
# of the last turn follows, then bench/step_trace.py's summary of every run's --step-trace (how
# far apart the ranks reach the all-reduce, how long it takes once both have, and what lock step
# would cost the free-running ranks with their own step times).
# usage: bench/ddp_overhead.sh [TURNS (5)] [STEPS (100)] [ddp-train flags for all runs...]
set -euo pipefail
cd "$(dirname "$0")/.."
turns=${1:-5}
steps=${2:-100}
shift $(($# < 2 ? $# : 2))
source bench/common.sh
ensure_bench_data
data=$bench_data
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Trains once: run NAME TURN [flags...]. The metrics' epoch record lands in $out/NAME.jsonl, the
# step traces in $out/NAME.TURN.RANK.csv.
run() {
  local name=$1 turn=$2
  shift 2
  rm -f "$out/$name.jsonl"
  build/ddp-train --nproc-per-node 2 --threads 1 --data-dir "$data" --epochs 1 --max-steps "$steps" \
    --no-eval --log-every 1000000 --metrics "$out/$name.jsonl" --step-trace "$out/$name.$turn" \
    "$@" >/dev/null
}
# The value of KEY in run NAME's epoch record: value NAME KEY.
value() { last_metric "$out/$1.jsonl" "$2"; }

echo "| turn | with DDP s | lockstep only s | without communication s | DDP overhead | lockstep only |"
echo "|---|---|---|---|---|---|"
ratios=()
lockstep_ratios=()
for ((i = 1; i <= turns; i++)); do
  run ddp "$i" "$@"
  run lockstep "$i" --lockstep-baseline "$@"
  run baseline "$i" --no-sync-baseline "$@"
  a=$(value ddp epoch_seconds)
  l=$(value lockstep epoch_seconds)
  b=$(value baseline epoch_seconds)
  ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')")
  lockstep_ratios+=("$(awk -v a="$l" -v b="$b" 'BEGIN { print a / b }')")
  awk -v i="$i" -v a="$a" -v l="$l" -v b="$b" 'BEGIN {
    printf "| %d | %.3f | %.3f | %.3f | %+.1f%% | %+.1f%% |\n", i, a, l, b, 100 * (a / b - 1), 100 * (l / b - 1) }'
done
percent() { awk -v m="$1" 'BEGIN { printf "%+.1f%%", 100 * (m - 1) }'; }
echo
echo "median DDP overhead: $(percent "$(median "${ratios[@]}")") ($turns turns, $steps steps of 2 x 64 images)"
echo "median cost of lockstep alone (one float all-reduced per step, no gradients): $(percent "$(median "${lockstep_ratios[@]}")")"
echo
echo "step time on rank 0, last turn (ms per step; the lockstep run's all-reduce counts as exposed communication):"
echo "| run | data wait | forward | backward | exposed communication | optimizer |"
echo "|---|---|---|---|---|---|"
for name in ddp lockstep baseline; do
  printf "| %s |" "$name"
  for key in data_wait_seconds forward_seconds backward_seconds comm_exposed_seconds optimizer_seconds; do
    awk -v s="$(value "$name" "$key")" -v n="$steps" 'BEGIN { printf " %.2f |", 1000 * s / n }'
  done
  echo
done
echo
echo "where the waiting goes, medians over the $turns turns (bench/step_trace.py; ms per step):"
traces() { local t p=""; for ((t = 1; t <= turns; t++)); do p+="${p:+,}$out/$1.$t"; done; echo "$1=$p"; }
python3 bench/step_trace.py "$(traces ddp)" "$(traces lockstep)" "$(traces baseline)"
