#!/usr/bin/env bash
# DDP overhead: 2 workers x 1 thread training with DDP against the same two processes training
# without any gradient communication (--no-sync-baseline), same batch, in turns. A third run in
# each turn keeps the ranks in step without moving gradients (--lockstep-baseline: an all-reduce
# of one float after every backward), to tell what DDP itself costs from what waiting for the
# slower rank costs. Times are the job's training seconds from --metrics; the step-time breakdown
# of the last turn follows, then tools/step_trace.py's summary of every run's --step-trace (how
# far apart the ranks reach the all-reduce, how long it takes once both have, and what lock step
# would cost the free-running ranks with their own step times).
# The warm overhead compares the runs' paces once the first steps are over (tools/step_trace.py:
# the slowest rank's step time from the 6th step on, from step STEPS/10 + 1 in runs under 50
# steps). It leaves out start-up costs that every run pays but DDP pays in lock step (oneDNN
# building its kernels, the heap faulted in: on this VM a rank's first 2 steps took 350-520 ms
# together, where a warm step takes ~30).
# PyTorch's own DDP is measured the same way in each turn (bench/reference_ddp.py with and without
# --no-sync, 2 workers x 1 thread, same data and batch), as a percentage and in ms per step: its
# step is longer than ddp-train's, so the same milliseconds are a smaller percentage of it.
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
  "$build/ddp-train" --nproc-per-node 2 --threads 1 --data-dir "$data" --epochs 1 --max-steps "$steps" \
    --no-eval --log-every 1000000 --metrics "$out/$name.jsonl" --step-trace "$out/$name.$turn" \
    "$@" >/dev/null
}
# The value of KEY in run NAME's epoch record: value NAME KEY.
value() { last_metric "$out/$1.jsonl" "$2"; }
# A over B: ratio A B.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print a / b }'; }
# How many ms per step A seconds took longer than B seconds: extra_ms A B.
extra_ms() { awk -v a="$1" -v b="$2" -v n="$steps" 'BEGIN { print 1000 * (a - b) / n }'; }
# The DDP run's pace over the baseline's in turn TURN (ms per step once warm, slowest rank; one
# Python for both): warm_ratio TURN.
warm_ratio() {
  python3 -c 'import sys; sys.path.insert(0, "bench"); import step_trace
ddp, baseline = (step_trace.summarise(p)["pace_ms"] for p in sys.argv[1:])
print(ddp / baseline)' "$out/ddp.$1" "$out/baseline.$1"
}
# The Python reference's training seconds (its slowest rank's): reference_seconds [--no-sync]. Its
# allocator is held in the mode the reference usually runs in (glibc's adaptive mmap threshold
# otherwise settles now and then so that every step faults in its activations afresh, ~3x slower;
# include/ddp/allocator.h says why), the same for both runs: that mode is malloc's, not DDP's.
reference_seconds() {
  GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=134217728 \
    "$python" bench/reference_ddp.py --data-dir "$data" --world-size 2 --threads 1 \
    --epochs 1 --max-steps "$steps" --no-eval --port "$(free_port)" "$@" 2>/dev/null |
    sed -n 's/.* images\/s, \([0-9.]*\) s,.*/\1/p'
}

echo "| turn | with DDP s | lockstep only s | without communication s | DDP overhead | lockstep only | DDP overhead, warm | PyTorch DDP s | PyTorch without communication s | PyTorch DDP overhead |"
echo "|---|---|---|---|---|---|---|---|---|---|"
ratios=()
lockstep_ratios=()
warm_ratios=()
reference_ratios=()
added_ms=()
reference_added_ms=()
for ((i = 1; i <= turns; i++)); do
  run ddp "$i" "$@"
  run lockstep "$i" --lockstep-baseline "$@"
  run baseline "$i" --no-sync-baseline "$@"
  a=$(value ddp epoch_seconds)
  l=$(value lockstep epoch_seconds)
  b=$(value baseline epoch_seconds)
  ra=$(reference_seconds)
  rb=$(reference_seconds --no-sync)
  w=$(warm_ratio "$i")
  warm_ratios+=("$w")
  ratios+=("$(ratio "$a" "$b")")
  lockstep_ratios+=("$(ratio "$l" "$b")")
  reference_ratios+=("$(ratio "$ra" "$rb")")
  added_ms+=("$(extra_ms "$a" "$b")")
  reference_added_ms+=("$(extra_ms "$ra" "$rb")")
  awk -v i="$i" -v a="$a" -v l="$l" -v b="$b" -v w="$w" -v ra="$ra" -v rb="$rb" 'BEGIN {
    printf "| %d | %.3f | %.3f | %.3f | %+.1f%% | %+.1f%% | %+.1f%% | %.3f | %.3f | %+.1f%% |\n", i, a,
      l, b, 100 * (a / b - 1), 100 * (l / b - 1), 100 * (w - 1), ra, rb, 100 * (ra / rb - 1) }'
done
percent() { awk -v m="$1" 'BEGIN { printf "%+.1f%%", 100 * (m - 1) }'; }
ms() { awk -v m="$1" 'BEGIN { printf "%+.2f ms", m }'; }
step_ms() { awk -v s="$1" -v n="$steps" 'BEGIN { printf "%.1f", 1000 * s / n }'; }
echo
echo "median DDP overhead: $(percent "$(median "${ratios[@]}")") ($turns turns, $steps steps of 2 x 64 images)"
warm_from=$((steps / 10 < 5 ? steps / 10 + 1 : 6)) # step_trace.py leaves out min(5, steps/10)
echo "median DDP overhead once warm (paces from step $warm_from on): $(percent "$(median "${warm_ratios[@]}")")"
echo "median cost of lockstep alone (one float all-reduced per step, no gradients): $(percent "$(median "${lockstep_ratios[@]}")")"
echo "median PyTorch DDP overhead, same measurement: $(percent "$(median "${reference_ratios[@]}")")"
echo "median added time per step: ddp-train $(ms "$(median "${added_ms[@]}")") on $(step_ms "$b") ms, PyTorch $(ms "$(median "${reference_added_ms[@]}")") on $(step_ms "$rb") ms (last turn's step without communication)"
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
echo "where the waiting goes, medians over the $turns turns (tools/step_trace.py; ms per step):"
traces() { local t p=""; for ((t = 1; t <= turns; t++)); do p+="${p:+,}$out/$1.$t"; done; echo "$1=$p"; }
python3 tools/step_trace.py "$(traces ddp)" "$(traces lockstep)" "$(traces baseline)"
