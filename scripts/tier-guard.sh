#!/usr/bin/env bash
# A guard, not a benchmark: runs COMMAND natively and then under each TIER (scripts/cpu-tier.sh),
# prints the seconds each took, and fails if a tier took more than MAX_RATIO times the native run,
# or if the command failed or its output lost the native run's final test accuracy. It catches a
# kernel that falls to a reference loop on older CPUs (1,000x slower once, and nothing noticed),
# not a few percent.
#
# usage: scripts/tier-guard.sh [--max-ratio R (5)] TIER... -- COMMAND [ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
max_ratio=5
if [[ ${1:-} == --max-ratio ]]; then
  max_ratio=${2:?--max-ratio needs a number}
  shift 2
fi
tiers=()
while (($#)) && [[ $1 != -- ]]; do
  tiers+=("$1")
  shift
done
[[ ${1:-} == -- ]] && shift
if ((${#tiers[@]} == 0 || $# == 0)); then
  echo "usage: scripts/tier-guard.sh [--max-ratio R] TIER... -- COMMAND [ARGS...]" >&2
  exit 2
fi

# Runs the command under tier $1; prints its seconds and its last 'test_acc' figure.
run_on() {
  local out start status=0
  out=$(mktemp)
  start=$(date +%s.%N)
  scripts/cpu-tier.sh "$1" "${@:2}" >"$out" 2>&1 || status=$?
  local seconds
  seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  if ((status != 0)); then
    echo "tier-guard: '${*:2}' failed under the $1 tier (exit $status); its last lines:" >&2
    tail -20 "$out" >&2
    rm -f "$out"
    return 1
  fi
  echo "$seconds $(grep -oE 'test_acc [0-9.]+%' "$out" | tail -1 | cut -d' ' -f2)"
  rm -f "$out"
}

read -r native_seconds native_accuracy < <(run_on native "$@") || exit 1
echo "| tier | seconds | / native | test accuracy |"
echo "|---|---|---|---|"
echo "| native | $native_seconds | 1.00 | ${native_accuracy:-n/a} |"
failed=0
for tier in "${tiers[@]}"; do
  if ! result=$(run_on "$tier" "$@"); then
    failed=1
    continue
  fi
  read -r seconds accuracy <<<"$result"
  ratio=$(awk -v a="$seconds" -v b="$native_seconds" 'BEGIN { printf "%.2f", a / b }')
  echo "| $tier | $seconds | $ratio | ${accuracy:-n/a} |"
  if awk -v r="$ratio" -v m="$max_ratio" 'BEGIN { exit !(r > m) }'; then
    echo "tier-guard: the $tier tier took ${ratio}x the native run (more than ${max_ratio}x):" \
      "a layer may run a reference kernel there (ddp-train --version says what runs each)" >&2
    failed=1
  fi
  if [[ $accuracy != "$native_accuracy" ]]; then
    echo "tier-guard: the $tier tier reached ${accuracy:-no} test accuracy, the native run" \
      "${native_accuracy:-none}" >&2
    failed=1
  fi
done
exit "$failed"
