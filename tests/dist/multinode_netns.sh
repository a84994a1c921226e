#!/usr/bin/env bash
# Two "hosts": network namespaces joined by a veth pair, each with its own address, one node
# each with 2 workers; a few training steps, then all four ranks must report the same weights.
# usage: multinode_netns.sh DDPRUN DDP_TRAIN     (exit 77 = skipped: needs root and iproute2)
set -uo pipefail
ddprun=$1
train=$2
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
  echo "SKIP: needs root and iproute2 for network namespaces"
  exit 77
fi
a=ddpa$$ b=ddpb$$ va=va$$ vb=vb$$
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
set -e
ip netns add "$a"
ip netns add "$b"
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$a"
ip link set "$vb" netns "$b"
ip -n "$a" addr add 10.231.0.1/30 dev "$va"
ip -n "$b" addr add 10.231.0.2/30 dev "$vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$va" up
ip -n "$b" link set "$vb" up
set +e

"$train" make-data --out "$tmp/data" --train 1000 --test 200 >/dev/null
common=(--nnodes 2 --master-addr 10.231.0.1 --master-port 29555 --nproc-per-node 2 --)
job=("$train" --data-dir "$tmp/data" --epochs 1 --max-steps 5 --rendezvous-timeout 60 --timeout 60)
ip netns exec "$a" timeout 200 "$ddprun" --node-rank 0 "${common[@]}" "${job[@]}" >"$tmp/a.log" 2>&1 &
pa=$!
ip netns exec "$b" timeout 200 "$ddprun" --node-rank 1 "${common[@]}" "${job[@]}" >"$tmp/b.log" 2>&1 &
pb=$!
wait "$pa"; ra=$?
wait "$pb"; rb=$?
echo "--- node 0 (10.231.0.1), exit $ra"; cat "$tmp/a.log"
echo "--- node 1 (10.231.0.2), exit $rb"; cat "$tmp/b.log"
[[ $ra -eq 0 && $rb -eq 0 ]] || { echo "FAIL: a node failed"; exit 1; }
prints=$(cat "$tmp/a.log" "$tmp/b.log" | grep -o 'rank [0-3]: final weights fingerprint [0-9a-f]*')
ranks=$(echo "$prints" | awk '{print $2}' | sort -u | wc -l)
unique=$(echo "$prints" | awk '{print $6}' | sort -u | wc -l)
grep -q "world size 4" "$tmp/a.log" || { echo "FAIL: rank 0 did not see world size 4"; exit 1; }
[[ $ranks -eq 4 ]] || { echo "FAIL: expected 4 ranks to report, got $ranks"; exit 1; }
[[ $unique -eq 1 ]] || { echo "FAIL: ranks ended with different weights"; exit 1; }
echo "PASS: 4 ranks on 2 namespaces, identical weights"
