#!/usr/bin/env bash
# Runs a command as if this x86 machine's CPU stopped at an older instruction set, so that one
# AVX-512 machine can test and measure what users' AVX2-only or SSE4.1-only CPUs run: oneDNN
# (Debian's 2.x and LibTorch's own), LibTorch's kernels, MKL and libjpeg-turbo are each capped by
# their own environment variable, set here together; ddp.cpp's resampler follows LibTorch's.
#
# usage: scripts/cpu-tier.sh TIER [--] COMMAND [ARGS...]
#        scripts/cpu-tier.sh --list      the tiers this machine can play, one a line
#   TIER  native   the CPU as it is (the variables below unset)
#         avx512   AVX-512 (AVX512F/BW/VL/DQ), no AMX or AVX512-BF16 kernels
#         avx2     AVX2 with FMA: AMD Zen 2/3, most Intel laptops and desktops
#         sse41    SSE4.1: the oldest x86-64 CPUs anyone trains on
# The command sees DDP_CPU_TIER=TIER, for benchmarks' tables. A tier above what the CPU has is
# refused with exit status 77 (a test's "skipped"): it cannot be played, only run natively on
# such a machine.
set -euo pipefail

tiers=(native avx512 avx2 sse41)

# Whether this CPU has what TIER needs (/proc/cpuinfo's flags; only native off x86).
cpu_can() {
  local flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  case $1 in
    native) return 0 ;;
    avx512) [[ $flags == *" avx512f "* && $flags == *" avx512bw "* && $flags == *" avx512vl "* &&
      $flags == *" avx512dq "* ]] ;;
    avx2) [[ $flags == *" avx2 "* && $flags == *" fma "* ]] ;;
    sse41) [[ $flags == *" sse4_1 "* ]] ;;
    *) return 1 ;;
  esac
}

if [[ ${1:-} == --list ]]; then
  for tier in "${tiers[@]}"; do cpu_can "$tier" && echo "$tier"; done
  exit 0
fi
tier=${1:-}
shift || true
[[ ${1:-} == -- ]] && shift
if [[ ! " ${tiers[*]} " == *" $tier "* ]] || (($# == 0)); then
  echo "usage: scripts/cpu-tier.sh native|avx512|avx2|sse41 [--] COMMAND [ARGS...]" >&2
  echo "       scripts/cpu-tier.sh --list" >&2
  exit 2
fi
if ! cpu_can "$tier"; then
  echo "cpu-tier: this CPU ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs)) has no" \
    "$tier; it can play: $("$0" --list | xargs)" >&2
  exit 77
fi

unset ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA ATEN_CPU_CAPABILITY MKL_ENABLE_INSTRUCTIONS \
  JSIMD_FORCENONE JSIMD_FORCESSE2 JSIMD_FORCEAVX2
case $tier in
  avx512)
    export ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512
    ;;  # libjpeg-turbo 2.1 has no AVX-512 code: AVX2 already
  avx2)
    # libjpeg-turbo 2.1's best is AVX2 already; its JSIMD_FORCEAVX2 would also drop the SSE2-only
    # routines (the scaled IDCTs) that a real AVX2 CPU runs.
    export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
    ;;
  sse41)
    # LibTorch's kernels below AVX2 are its 'default' build (SSE2 and up); libjpeg-turbo's x86-64
    # code below AVX2 is SSE2; MKL's lowest setting is SSE4.2, one step above the tier.
    export ONEDNN_MAX_CPU_ISA=SSE41 ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 \
      JSIMD_FORCESSE2=1
    ;;
esac
export DDP_CPU_TIER=$tier
exec "$@"
