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
common=(--nnodes 2 --master-addr $addr_a --master-port 29555 --nproc-per-node 2 --)
job=("$train" --data-dir "$tmp/data" --epochs 1 --max-steps 5 --rendezvous-timeout 60 --timeout 60)
ip netns exec "$a" timeout 200 "$ddprun" --node-rank 0 "${common[@]}" "${job[@]}" >"$tmp/a.log" 2>&1 &
pa=$!
ip netns exec "$b" timeout 200 "$ddprun" --node-rank 1 "${common[@]}" "${job[@]}" >"$tmp/b.log" 2>&1 &
pb=$!
wait "$pa"; ra=$?
wait "$pb"; rb=$?
echo "--- node 0 ($addr_a), exit $ra"; cat "$tmp/a.log"
echo "--- node 1 ($addr_b), exit $rb"; cat "$tmp/b.log"
[[ $ra -eq 0 && $rb -eq 0 ]] || { echo "FAIL: a node failed"; exit 1; }
prints=$(cat "$tmp/a.log" "$tmp/b.log" | grep -o 'rank [0-3]: final weights fingerprint [0-9a-f]*')
ranks=$(echo "$prints" | awk '{print $2}' | sort -u | wc -l)
unique=$(echo "$prints" | awk '{print $6}' | sort -u | wc -l)
grep -q "world size 4" "$tmp/a.log" || { echo "FAIL: rank 0 did not see world size 4"; exit 1; }
[[ $ranks -eq 4 ]] || { echo "FAIL: expected 4 ranks to report, got $ranks"; exit 1; }
[[ $unique -eq 1 ]] || { echo "FAIL: ranks ended with different weights"; exit 1; }
echo "PASS: 4 ranks on 2 namespaces, identical weights"
