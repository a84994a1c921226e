#!/usr/bin/env bash
# A guard, not a benchmark: runs COMMAND natively and then under each TIER (scripts/cpu-tier.sh),
# prints the seconds each took and the last epoch's test accuracy, and fails if a tier took more
# than R times the native run, if the command failed, or if its accuracy is more than G points
# from the native run's (kernels for other instruction sets round differently: on Debian 12's
# LibTorch 1.13 the quick start reached 79.08% natively, 79.07% on avx2, 79.05% on sse41; on
# PyPI's 2.14 and 2.15, 79.05% on all three). It catches a kernel that falls to a reference loop
# on older CPUs (1,000x slower once, and nothing noticed), or one that computes something else;
# not a few percent.
#
# usage: scripts/tier-guard.sh [--max-ratio R (5; 0: no time check)] [--max-accuracy-gap G (0.1)]
#                              TIER... -- COMMAND [ARGS...]
# Exit status: 0 all held, 1 something did not, 2 usage, 77 this CPU cannot play a TIER.
set -euo pipefail
cd "$(dirname "$0")/.."
max_ratio=5
max_gap=0.1
while [[ ${1:-} == --max-* ]]; do
  case $1 in
    --max-ratio) max_ratio=${2:?--max-ratio needs a number} ;;
    --max-accuracy-gap) max_gap=${2:?--max-accuracy-gap needs a number of points} ;;
    *) echo "tier-guard: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
tiers=()
while (($#)) && [[ $1 != -- ]]; do
  tiers+=("$1")
  shift
done
[[ ${1:-} == -- ]] && shift
if ((${#tiers[@]} == 0 || $# == 0)); then
  echo "usage: scripts/tier-guard.sh [--max-ratio R] [--max-accuracy-gap G] TIER... -- COMMAND" >&2
  exit 2
fi
for tier in "${tiers[@]}"; do
  status=0
  scripts/cpu-tier.sh "$tier" true || status=$?
  ((status == 0)) || exit "$status"  # 77: cannot be played here; 2: no such tier
done

# Runs the command under tier $1; prints its seconds and the last epoch line's test accuracy.
run_on() {
  local out start status=0 seconds
  out=$(mktemp)
  start=$(date +%s.%N)
  scripts/cpu-tier.sh "$1" "${@:2}" >"$out" 2>&1 || status=$?
  seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  if ((status != 0)); then
    echo "tier-guard: '${*:2}' failed under the $1 tier (exit $status); its last lines:" >&2
    tail -20 "$out" >&2
    rm -f "$out"
    return 1
  fi
  echo "$seconds $(grep -E '^epoch [0-9]+/[0-9]+ ' "$out" | tail -1 |
    grep -oE 'test_acc [0-9.]+%' | grep -oE '[0-9.]+')"
  rm -f "$out"
}

read -r native_seconds native_accuracy < <(run_on native "$@") || exit 1
echo "| tier | seconds | / native | test accuracy |"
echo "|---|---|---|---|"
echo "| native | $native_seconds | 1.00 | ${native_accuracy:-none}% |"
failed=0
for tier in "${tiers[@]}"; do
  if ! result=$(run_on "$tier" "$@"); then
    failed=1
    continue
  fi
  read -r seconds accuracy <<<"$result"
  ratio=$(awk -v a="$seconds" -v b="$native_seconds" 'BEGIN { printf "%.2f", a / b }')
  echo "| $tier | $seconds | $ratio | ${accuracy:-none}% |"
  if awk -v r="$ratio" -v m="$max_ratio" 'BEGIN { exit !(m > 0 && r > m) }'; then
    echo "tier-guard: the $tier tier took ${ratio}x the native run (more than ${max_ratio}x):" \
      "a layer may run a reference kernel there (the run's 'layers:' line says what runs each)" >&2
    failed=1
  fi
  if [[ -z $accuracy || -z $native_accuracy ]] ||
    awk -v a="$accuracy" -v b="$native_accuracy" -v g="$max_gap" \
      'BEGIN { d = a - b; exit !(d > g + 1e-9 || -d > g + 1e-9) }'; then
    echo "tier-guard: the $tier tier reached ${accuracy:-no} test accuracy, the native run" \
      "${native_accuracy:-none} (at most $max_gap points apart allowed)" >&2
    failed=1
  fi
done
exit "$failed"
