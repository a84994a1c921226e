#!/usr/bin/env bash
# Two "hosts": network namespaces joined by a veth pair, each with its own address, one node
# each with 2 workers; a few training steps, then all four ranks must report the same weights.
# usage: multinode_netns.sh DDPRUN DDP_TRAIN     (exit 77 = skipped: needs root and iproute2)
set -uo pipefail
ddprun=$1
train=$2
source "$(dirname "$0")/../../scripts/lib/netns.sh"
if ! netns_pair_available; then
  echo "SKIP: needs root and iproute2 for network namespaces"
  exit 77
fi
tmp=$(mktemp -d)
trap 'netns_pair_down; rm -rf "$tmp"' EXIT
netns_pair_up || { echo "FAIL: could not make the network namespaces"; exit 1; }
a=$ns_a b=$ns_b

"$train" make-data --out "$tmp/data" --train 1000 --test 200 >/dev/null
job=("$train" --data-dir "$tmp/data" --epochs 1 --max-steps 5 --rendezvous-timeout 60 --timeout 60)
netns_run_two_nodes 200 "$ddprun" "$tmp/a.log" "$tmp/b.log" --master-port 29555 \
  --nproc-per-node 2 -- "${job[@]}"
ra=$netns_rc_a rb=$netns_rc_b
echo "--- node 0 ($addr_a), exit $ra"; cat "$tmp/a.log"
echo "--- node 1 ($addr_b), exit $rb"; cat "$tmp/b.log"
[[ $ra -eq 0 && $rb -eq 0 ]] || { echo "FAIL: a node failed"; exit 1; }
prints=$(cat "$tmp/a.log" "$tmp/b.log" | grep -o 'rank [0-3]: final weights fingerprint [0-9a-f]*')
ranks=$(echo "$prints" | awk '{print $2}' | sort -u | wc -l)
unique=$(echo "$prints" | awk '{print $6}' | sort -u | wc -l)
grep -q "world size 4" "$tmp/a.log" || { echo "FAIL: rank 0 did not see world size 4"; exit 1; }
[[ $ranks -eq 4 ]] || { echo "FAIL: expected 4 ranks to report, got $ranks"; exit 1; }
[[ $unique -eq 1 ]] || { echo "FAIL: ranks ended with different weights"; exit 1; }

# Who can reach rank 0's store: from LibTorch 2.4 it listens on the master address only; 1.13's
# TCPStore server binds every interface (it has no option for it; README, Security). Rank 0
# waits at the rendezvous for node 1, which never comes; meanwhile its listening socket is read
# from the namespace's /proc/net/tcp*.
read -r major minor < <("$train" --version | sed -n 's/.*LibTorch \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
port=29557
hexport=$(printf '%04X' $port)
ip netns exec "$a" timeout 60 "$ddprun" --node-rank 0 --nnodes 2 --master-addr "$addr_a" \
  --master-port $port --nproc-per-node 1 -- "${job[@]}" >"$tmp/store.log" 2>&1 &
pstore=$!
listen=""
for _ in $(seq 150); do # until the store listens: bounded, at most 30 s
  listen=$(ip netns exec "$a" awk -v p=":$hexport" '$4 == "0A" && $2 ~ p "$" { print $2 }' \
    /proc/net/tcp /proc/net/tcp6 | head -1)
  [[ -n $listen ]] && break
  sleep 0.2
done
kill "$pstore" 2>/dev/null
wait "$pstore"
[[ -n $listen ]] || { echo "FAIL: the store never listened on port $port"; cat "$tmp/store.log"; exit 1; }
if ((major > 2 || (major == 2 && minor >= 4))); then
  [[ $listen == "0100E70A:$hexport" ]] ||
    { echo "FAIL: LibTorch $major.$minor: the store listens on $listen, not only $addr_a"; exit 1; }
  echo "the store listens on $addr_a only ($listen)"
else
  [[ $listen =~ ^0+:$hexport$ ]] ||
    { echo "FAIL: expected 1.13's any-address listener, got $listen"; exit 1; }
  echo "LibTorch $major.$minor: the store listens on every interface ($listen), as documented"
fi
echo "PASS: 4 ranks on 2 namespaces, identical weights"
