#!/usr/bin/env bash
# Builds ddp.cpp against LibTorch 2.x and runs the whole test suite there.
#
# Debian 13 (trixie) ships libtorch-dev 2.6 and python3-torch 2.6. This script makes a trixie
# root with debootstrap (kept between runs: DDP_TRIXIE_ROOT, default
# /var/cache/ddp.cpp/trixie-root), runs the README's own scripts/setup.sh inside it (so the
# package list is checked on Debian 13 too), copies the working tree in and runs
# scripts/test.sh. Needs root (debootstrap, chroot, bind mounts).
#
# With --cuda it builds against Debian 13's CUDA LibTorch instead (libtorch-cuda-dev 2.6 from
# contrib, the CUDA toolkit from non-free), in a root of its own: no GPU needed, it checks that
# the CUDA and NCCL code paths compile and link (scripts/gpu-check.sh runs them on a GPU).
#
# Usage: scripts/check-libtorch2.sh [--cuda] [ctest arguments, e.g. -R Ddp]
#   DDP_TRIXIE_ROOT=/path   where the Debian 13 root lives (created if missing; with --cuda the
#                           default is /var/cache/ddp.cpp/trixie-cuda-root)
#   DDP_TRIXIE_MIRROR=url   the Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cuda=0
if [[ ${1:-} == --cuda ]]; then
  cuda=1
  shift
fi
cpu_root=/var/cache/ddp.cpp/trixie-root
if ((cuda)); then
  root=${DDP_TRIXIE_ROOT:-/var/cache/ddp.cpp/trixie-cuda-root}
  components="main contrib non-free"
else
  root=${DDP_TRIXIE_ROOT:-$cpu_root}
  components="main"
fi
mirror=${DDP_TRIXIE_MIRROR:-http://deb.debian.org/debian}

if [[ $(id -u) -ne 0 ]]; then
  echo "check-libtorch2: needs root (debootstrap and chroot); run it with sudo" >&2
  exit 2
fi

log() { echo "check-libtorch2: $*"; }

# 1. The Debian 13 root, made once. The marker is written last, so an interrupted debootstrap
#    is started again from scratch rather than reused half-made.
if [[ ! -f $root/.ddp-root-ready ]]; then
  command -v debootstrap >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
  rm -rf "$root"
  if ((cuda)) && [[ -f $cpu_root/.ddp-root-ready ]] && ! mountpoint -q "$cpu_root"; then
    log "copying the Debian 13 root $cpu_root to $root"
    cp -a "$cpu_root" "$root"
    rm -rf "$root/src"
  else
    log "making a Debian 13 root in $root (a few minutes, once)"
    mkdir -p "$root"
    debootstrap --variant=minbase trixie "$root" "$mirror"
  fi
  echo "deb $mirror trixie $components" >"$root/etc/apt/sources.list"
  touch "$root/.ddp-root-ready"
fi

# 2. What the tests need from the host: /proc (child processes), /dev (shm, null, urandom),
#    /sys and /run/netns (network namespaces), name resolution for localhost.
mounts=()
bind() {
  mkdir -p "$root/$1"
  mount --bind "/$1" "$root/$1"
  mounts=("$root/$1" "${mounts[@]}")
}
cleanup() {
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
}
trap cleanup EXIT
# ip netns exec remounts / as a slave: / must be a mount point inside the root too.
mount --bind "$root" "$root"
mounts=("$root" "${mounts[@]}")
bind proc
bind dev
bind dev/pts
bind sys
cp /etc/resolv.conf "$root/etc/resolv.conf"

# 3. The working tree (tracked and untracked-but-not-ignored files), brought up to date each run;
#    the build folders inside the root are kept so an unchanged tree rebuilds quickly. Only files
#    whose content changed are replaced, and they get the current time: tar would restore the
#    working tree's times, and a file edited before the root's last build would then look older
#    than the objects built from its previous content, so ninja would keep those (a header that
#    changed a struct's layout did exactly that: stale objects, garbage in the options).
src=$root/src/ddp.cpp
incoming=$root/src/.incoming
rm -rf "$incoming"
mkdir -p "$src" "$incoming"
git -C "$repo" ls-files -z --cached --others --exclude-standard |
  tar -C "$repo" --null -T - -cf - | tar -C "$incoming" -xf -
(cd "$src" && find . \( -path ./build -o -path ./build-cuda \) -prune -o -type f -print0) |
  while IFS= read -r -d '' f; do [[ -e $incoming/$f ]] || rm -f "$src/$f"; done
(cd "$incoming" && find . -type f -print0) | while IFS= read -r -d '' f; do
  if ! cmp -s "$incoming/$f" "$src/$f"; then
    mkdir -p "$(dirname "$src/$f")"
    rm -f "$src/$f"
    cp --preserve=mode "$incoming/$f" "$src/$f"
  fi
done
rm -rf "$incoming"

# 4. The README's setup and test commands, inside Debian 13.
in_root() { chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 bash -c "$1"; }
if ((cuda)); then
  log "packages for the CUDA LibTorch inside Debian 13"
  # nvidia-cudnn, which the CUDA LibTorch depends on, is an installer that downloads cuDNN from
  # nvidia.com (not reachable here): its postinst is made a no-op so that the rest configures.
  # Without cuDNN's library the programs link only with --allow-shlib-undefined and cannot
  # start, so this compiles and links everything but runs nothing (not even the test binaries'
  # listing at build time: discovery is left to ctest).
  in_root "export DEBIAN_FRONTEND=noninteractive; apt-get update -q &&
    { apt-get install -y -q --no-install-recommends nvidia-cudnn ||
      { printf '#!/bin/sh\nexit 0\n' >/var/lib/dpkg/info/nvidia-cudnn.postinst &&
        dpkg --configure -a; }; }"
  in_root "cd /src/ddp.cpp && DDP_LIBTORCH=cuda DDP_SETUP_BUILD=0 scripts/setup.sh"
  log "compiling against the CUDA LibTorch"
  in_root "cd /src/ddp.cpp && cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST" | tee "$root/cuda-configure.log"
  grep -q "ddp: LibTorch has CUDA and c10d's NCCL backend" "$root/cuda-configure.log" ||
    { log "FAILED: CMake did not find CUDA and NCCL in that LibTorch"; exit 1; }
  in_root "cd /src/ddp.cpp && cmake --build build-cuda -j$(nproc)" | tee "$root/cuda-build.log"
  if grep -v "libcudnn" "$root/cuda-build.log" | grep -q "warning:"; then
    log "FAILED: warnings in the CUDA build (see $root/cuda-build.log)"
    exit 1
  fi
  log "compiled and linked against $(in_root "dpkg-query -W -f='\${Package} \${Version}' libtorch-cuda-dev")"
  exit 0
fi
log "setup inside Debian 13"
in_root "cd /src/ddp.cpp && scripts/setup.sh"
in_root "dpkg-query -W -f='built against libtorch-dev \${Version}\n' libtorch-dev"
log "tests inside Debian 13"
in_root "cd /src/ddp.cpp && scripts/test.sh $(printf '%q ' "$@")"  # quoted: -R "a|b" stays one
log "passed against LibTorch $(in_root "dpkg-query -W -f='\${Version}' libtorch-dev")"
