#!/usr/bin/env bash
# Elastic membership across "hosts" in network namespaces: three nodes of two workers meet at
# node 0's endpoint (ddprun --nnodes 2:4 --rdzv-backend c10d) and train; mid-run, SCENARIO:
#   kill     node 2's launcher and workers are SIGKILLed
#   link     node 2's link goes down
#   stop     node 2 is frozen (SIGSTOP): the heartbeat must evict it
#   add      a fourth node starts
#   restart  node 2 is killed, then started again once the others go on without it
# and ft-kill, ft-link, ft-stop, ft-add: the same with --on-failure continue (no restart: the
# survivors go on at the next step; the added node's workers take the state from a peer).
# Each time the job goes on and ends with every rank of the last round holding the same weights,
# the change logged, and no process left behind.
# usage: elastic_netns.sh SCENARIO DDPRUN DDP_TRAIN   (exit 77 = skipped: needs root and iproute2)
set -uo pipefail
scenario=$1 ddprun=$2 train=$3
on_failure=restart
if [[ $scenario == ft-* ]]; then on_failure=continue scenario=${scenario#ft-}; fi
source "$(dirname "$0")/../../scripts/lib/netns_nodes.sh"
netns_nodes_available || { echo "SKIP: needs root and iproute2 for network namespaces"; exit 77; }
tmp=$(mktemp -d)
trap 'netns_nodes_down; rm -rf "$tmp"' EXIT
nodes=3
[[ $scenario == add ]] && nodes=4
netns_nodes_up $nodes || { echo "FAIL: could not make the network namespaces"; exit 1; }
fail() { for f in "$tmp"/node*.log; do echo "--- $f"; cat "$f"; done; echo "FAIL: $*"; exit 1; }

"$train" make-data --out "$tmp/data" --train 3000 --test 200 >/dev/null
# Rank 0 sleeps 150 ms a step (DDP_FAULT slow), so that the run lasts while the scenario plays:
# 3 epochs of 32 steps at world size 6.
job=("$train" --data-dir "$tmp/data" --epochs 3 --batch-size 16 --no-eval --rendezvous-timeout 60
  --timeout 60 --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 4)
pid=()
start_node() { # start_node I: node I's agent in its namespace, output appended to nodeI.log
  local i=$1
  ip netns exec "${node_ns[i]}" env DDP_FAULT=slow@1:0:150 timeout 300 "$ddprun" --nnodes 2:4 \
    --rdzv-backend c10d --rdzv-endpoint "${node_addr[0]}:29600" --rdzv-id elastic-test \
    --rdzv-conf last_call_timeout=3,keep_alive_interval=1 --nproc-per-node 2 --log-dir "$tmp" \
    --on-failure $on_failure \
    -- "${job[@]}" >>"$tmp/node$i.log" 2>&1 &
  pid[i]=$!
}
signal_node() { netns_node_pids "$1" | xargs -r kill "-$2"; } # every process of node I
wait_for() { # wait_for SECONDS COMMAND...: until the command succeeds, at most SECONDS
  local s limit=$(($1 * 10))
  shift
  for ((s = 0; s < limit; s++)); do
    "$@" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
wait_for_line() { wait_for "$3" grep -q "$2" "$1"; } # wait_for_line FILE TEXT SECONDS

for ((i = 0; i < 3; i++)); do start_node $i; done
wait_for_line "$tmp/node0.log" "round 1:" 60 || fail "the first round did not form"
# Mid-epoch: once the checkpoint of step 8 is there.
wait_for 60 test -e "$tmp/ck/checkpoint-epoch-0000-step-00000008.pt" || fail "no checkpoint at step 8"
survivors=(0 1) world=4
case $scenario in
  kill) signal_node 2 KILL ;;
  link) netns_node_link 2 down ;;
  stop) signal_node 2 STOP ;;
  add) start_node 3 && survivors=(0 1 2 3) world=8 ;;
  restart)
    signal_node 2 KILL
    wait "${pid[2]}" 2>/dev/null
    wait_for_line "$tmp/node0.log" "round 2:" 60 || fail "no new round after the kill"
    start_node 2
    survivors=(0 1 2) world=6
    ;;
  *) echo "unknown scenario $scenario" && exit 2 ;;
esac
for i in "${survivors[@]}"; do
  wait "${pid[i]}" || fail "node $i exited with $?"
done
[[ $scenario == stop ]] && signal_node 2 KILL # frozen: it cannot end by itself
if [[ $scenario == link ]]; then              # cut off: its agent must give up by itself
  wait "${pid[2]}" && fail "the cut-off node 2 exited with 0"
  grep -q "rendezvous store" "$tmp/node2.log" || fail "node 2 did not say it lost the store"
fi
for ((i = 0; i < nodes; i++)); do
  for _ in $(seq 50); do [[ -z $(netns_node_pids $i) ]] && break; sleep 0.1; done
  [[ -z $(netns_node_pids $i) ]] || fail "processes left on node $i: $(netns_node_pids $i)"
done
if [[ $on_failure == restart ]]; then # the agent's line: the round ends
  grep -q "membership change: round [0-9]* (world size [0-9]*) ends" "$tmp/node0.log" ||
    fail "no membership change logged by node 0's agent"
else # rank 0's line: the group changes at a step. Rank 0 is on whichever node the first round
  # ordered first, not always node 0.
  grep -q "membership change at step" "$tmp"/node*.log || fail "no membership change logged by rank 0"
fi
if [[ $on_failure == restart ]]; then # rank 0 of the new round (on any node) says what it cost
  grep -q "reached step [0-9]* and this one resumes at step [0-9]*: [0-9]* step(s) lost" \
    "$tmp"/node*.log ||
    fail "rank 0 did not say how many steps the new round lost"
fi
prints=$(cat "$tmp"/node*.log | grep -o 'rank [0-9]*: final weights fingerprint [0-9a-f]*')
ranks=$(echo "$prints" | awk '{print $2}' | sort -u | wc -l)
unique=$(echo "$prints" | awk '{print $6}' | sort -u | wc -l)
[[ $ranks -eq $world ]] || fail "expected $world ranks in the last round to finish, got $ranks"
[[ $unique -eq 1 ]] || fail "the ranks ended with different weights"
grep -h "round [0-9]*:\|membership change" "$tmp/node0.log"
grep -c . "$tmp/membership.jsonl" >/dev/null || fail "no membership.jsonl records"
echo "PASS: $scenario (--on-failure $on_failure): the job went on at world size $world, identical" \
  "weights, nothing left over"
