#!/usr/bin/env bash
# Proves the README on a machine that has nothing installed: makes a new minimal Debian root with
# debootstrap, copies the working tree into it, and runs there the README's setup command
# (scripts/setup.sh), its quick start and its test command (scripts/test.sh). The root is
# deleted afterwards, so no installed state carries over from one run to the next; only
# downloads are cached (Debian's archives and pip's wheels, under $DDP_CACHE). CI runs this.
#
# usage: scripts/fresh-root.sh [--suite bookworm|trixie] [--libtorch wheel|debian] [--keep]
#                              [--without-cuda-toolkit] [--command CMD]...
#                              [ctest arguments, e.g. -R Sampler]
#   --suite     the Debian release of the root (default bookworm, Debian 12)
#   --libtorch  passed to scripts/setup.sh: PyPI's torch (default) or Debian's libtorch-dev
#   --keep      leave the root in place afterwards (its path is printed)
#   --without-cuda-toolkit
#               leave the machine's CUDA toolkit out of the root, as most machines have none
#   --command   run CMD in the root's copy of the tree instead of the three commands above (as
#               often as given, in order; .ci/run passes the README's own lines this way)
#   DDP_CACHE=dir            downloads kept between runs (default /var/cache/ddp.cpp)
#   DDP_DEBIAN_MIRROR=url    the Debian mirror (default http://deb.debian.org/debian)
# Needs root (debootstrap, chroot, mounts). The machine's CUDA toolkit (/usr/local/cuda), which
# the project's machines have, is mounted read-only into the root unless --without-cuda-toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

suite=bookworm
libtorch=wheel
keep=0
cuda_toolkit=1
commands=()
while (($#)); do
  case $1 in
    --suite) suite=${2:?--suite needs bookworm or trixie}; shift 2 ;;
    --libtorch) libtorch=${2:?--libtorch needs wheel or debian}; shift 2 ;;
    --keep) keep=1; shift ;;
    --without-cuda-toolkit) cuda_toolkit=0; shift ;;
    --command) commands+=("${2:?--command needs a command line}"); shift 2 ;;
    *) break ;;
  esac
done
[[ $suite == bookworm || $suite == trixie ]] || { echo "fresh-root: unknown --suite $suite" >&2; exit 2; }
if ((${#commands[@]})) && (($#)); then
  echo "fresh-root: ctest arguments ($*) only go with the default commands, not with --command" >&2
  exit 2
fi
if ((${#commands[@]} == 0)); then  # the README's setup command, its quick start and its tests
  commands=("scripts/setup.sh --libtorch $libtorch"
    "build/ddp-train --dataset fashion-mnist --epochs 1"
    "scripts/test.sh $(printf '%q ' "$@")")
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "fresh-root: needs root (debootstrap, chroot, mounts); run it with sudo" >&2
  exit 2
fi
cache=${DDP_CACHE:-/var/cache/ddp.cpp}
mirror=${DDP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { echo "fresh-root: $(date +%T) $*"; }

source scripts/lib/debian_packages.sh
install_missing_packages fresh-root debootstrap

root=$(mktemp -d "/var/tmp/ddp-fresh-$suite.XXXXXX")
mounts=()
cleanup() {
  local m
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
  for m in "${mounts[@]}"; do
    if mountpoint -q "$m"; then  # never delete through a mount that is still there (the caches)
      log "$m is still mounted: the root is left in $root"
      return
    fi
  done
  if ((keep)); then
    log "the root is kept in $root"
  else
    rm -rf --one-file-system "$root"
  fi
}
trap cleanup EXIT
# bind HOST_DIR PATH_IN_ROOT [ro]
bind() {
  mkdir -p "$root/$2"
  mount --bind "$1" "$root/$2"
  mounts=("$root/$2" "${mounts[@]}")
  [[ ${3:-} == ro ]] && mount -o remount,bind,ro "$root/$2"
  return 0
}

# 1. A minimal Debian root, with the packages debootstrap fetched kept for the next run.
log "debootstrap $suite into $root"
mkdir -p "$cache/debootstrap-$suite" "$cache/apt-$suite" "$cache/pip"
debootstrap --variant=minbase --cache-dir="$cache/debootstrap-$suite" "$suite" "$root" "$mirror" \
  >"$root.debootstrap.log" 2>&1 || { cat "$root.debootstrap.log"; rm -f "$root.debootstrap.log"; exit 1; }
rm -f "$root.debootstrap.log"
echo "deb $mirror $suite main" >"$root/etc/apt/sources.list"
# What a machine of this network has before anything is installed: its resolver, and the trust
# its TLS proxy needs (local CAs, which Debian's ca-certificates adds to the system bundle when
# setup installs it, and pip's configuration pointing at that bundle).
cp /etc/resolv.conf "$root/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
[[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$root/etc/pip.conf"

# 2. What the tests need from the host: /proc (child processes), /dev (null, urandom, shm, pts),
#    /sys and a mount point at / (ip netns exec remounts / as a slave); the CUDA toolkit, unless
#    left out; and the download caches: apt's archives and pip's.
mount --bind "$root" "$root"
mounts=("$root")
bind /proc proc
bind /dev dev
bind /dev/pts dev/pts
bind /dev/shm dev/shm
bind /sys sys
if ((cuda_toolkit)) && [[ -d /usr/local/cuda/ ]]; then
  bind "$(readlink -f /usr/local/cuda)" usr/local/cuda ro
fi
bind "$cache/apt-$suite" var/cache/apt/archives
bind "$cache/pip" root/.cache/pip

# 3. The working tree as git sees it (tracked, and untracked but not ignored): no .venv, no build.
mkdir -p "$root/src/ddp.cpp"
git -C "$repo" ls-files -z --cached --others --exclude-standard |
  tar -C "$repo" --null -T - -cf - | tar -C "$root/src/ddp.cpp" -xf -

# 4. The README's commands, as a new user runs them.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /src/ddp.cpp && $1"
}
for command in "${commands[@]}"; do
  log "$command"
  in_root "$command"
done
toolkit_note=$( ((cuda_toolkit)) && [[ -d /usr/local/cuda/ ]] && echo "with" || echo "without")
log "passed: ${#commands[@]} command(s) in a fresh Debian $suite root $toolkit_note a CUDA toolkit ($(in_root 'build/ddp-train --version | head -1'))"
