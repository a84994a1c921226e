#!/usr/bin/env bash
# ddp-train against the Python reference (bench/reference_ddp.py on the build's reference
# Python: .venv's torch by default), same settings and data: 4 workers, batch 64 per worker, full-size synthetic CIFAR-format data
# (50,000 images), in turns A B C D A B C D ... (C: ddp-train with --cpu-bind cores, two workers
# per vCPU here; D: the same four processes without DDP, --no-sync-baseline, which shows what
# the model's own work reaches), each ddp-train run followed by the machine's fp32 ceiling
# (bench-ceiling) and ddp-train's fraction of it then: this VM's speed drifts by tens of percent
# over minutes, so a ceiling measured once, minutes away from a run, says little about it. The
# full ceiling table, for ddp-train's median images/s, ends the output.
# usage: bench/compare.sh [--tier native|avx512|avx2|sse41] [PAIRS (3)] [STEPS per run (100)]
#   --tier  both sides run as on a CPU of that tier (scripts/cpu-tier.sh; default native), and
#           the ceiling is that tier's; the table's head names the tier, the CPU and its flags.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --tier ]]; then
  tier=${2:?--tier needs native, avx512, avx2 or sse41}
  shift 2
  [[ ${DDP_CPU_TIER:-} == "$tier" ]] || exec scripts/cpu-tier.sh "$tier" bench/compare.sh "$@"
fi
pairs=${1:-3}
steps=${2:-100}
source bench/common.sh
ensure_bench_data
echo "tier: ${DDP_CPU_TIER:-native}; CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  "($(nproc) vCPUs; SIMD flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(sse4_1|avx|avx2|fma|avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16)$' | xargs))"
echo "Net's layers: $("$build/ddp-train" --version | sed -n "s/^Net's layers on this CPU ([^)]*): //p")"
echo
echo "| turn | Python reference images/s | ddp-train images/s | ratio | / ceiling right after, direct FLOPs | / ceiling, multiplies executed | --cpu-bind cores images/s | ratio | / ceiling, multiplies executed | without DDP images/s | / ceiling, multiplies executed |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
ratios=()
ours=()
fractions=()
executed=()
bound_ratios=()
bound_executed=()
alone_executed=()
# ddp-train's fraction of the ceiling at IMAGES_PER_SECOND: "direct executed" (in percent; where
# conv2 runs by Winograd the table has a line counting its real multiplies too).
ceiling_fractions() {
  local table direct multiplies
  table=$("$build/bench-ceiling" --images-per-second "$1")
  direct=$(sed -n 's/^| achieved at .* = \([0-9.]*\)% of the ceiling.*/\1/p' <<<"$table")
  multiplies=$(sed -n 's/^| achieved, counting the multiplies .* = \([0-9.]*\)% of the ceiling.*/\1/p' <<<"$table")
  echo "$direct ${multiplies:-$direct}"
}
for ((i = 1; i <= pairs; i++)); do
  a=$(reference_images_per_second "$steps")
  b=$(ddp_train_images_per_second "$steps")
  bound=$(ddp_train_images_per_second "$steps" --cpu-bind cores)
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
  rb=$(awk -v a="$a" -v b="$bound" 'BEGIN { printf "%.3f", b / a }')
  read -r c e < <(ceiling_fractions "$b")
  read -r _ eb < <(ceiling_fractions "$bound")
  alone=$(ddp_train_images_per_second "$steps" --no-sync-baseline)
  read -r _ ea < <(ceiling_fractions "$alone")
  alone_executed+=("$ea")
  ratios+=("$r")
  ours+=("$b")
  fractions+=("$c")
  executed+=("$e")
  bound_ratios+=("$rb")
  bound_executed+=("$eb")
  echo "| $i | $a | $b | $r | $c% | $e% | $bound | $rb | $eb% | $alone | $ea% |"
done
median=$(median "${ratios[@]}")
echo
echo "median ratio ddp-train / reference: $median ($pairs turns, $steps steps of 4 x 64 images each); with --cpu-bind cores: $(median "${bound_ratios[@]}")"
echo "median fraction of the ceiling measured right after each run: $(median "${fractions[@]}")% in a direct convolution's FLOPs, $(median "${executed[@]}")% in the multiplies executed; with --cpu-bind cores $(median "${bound_executed[@]}")%; without DDP $(median "${alone_executed[@]}")%"
echo
"$build/bench-ceiling" --images-per-second "$(median "${ours[@]}")"
