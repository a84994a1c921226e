#!/usr/bin/env bash
# What losing a node costs: the same job of three nodes of two workers (network namespaces; the
# tutorial's Net on generated CIFAR-format data, batch 16 per rank, rank 0 paced at SLOW_MS a
# step so that both programs step alike), node 2 SIGKILLed (launcher and workers) at step 20 of
# epoch 2, two ways side by side, each with its defaults otherwise:
#   ddp.cpp   ddprun --rdzv-backend c10d --nnodes 2:3; ddp-train checkpointing every 10 steps in
#             the background (--checkpoint-every-steps 10)
#   torchrun  .venv's torchrun --rdzv-backend c10d --nnodes 2:3 --max-restarts 3; PyTorch DDP
#             checkpointing at each epoch's end (bench/faults_reference.py)
# Prints a table: seconds from the kill to the next completed step, and the training progress
# lost (what was trained again after the restart, in seconds at the pace before the kill).
# usage: bench/faults.sh [SLOW_MS]   (as root; needs build/ and .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
slow=${1:-100}
python=.venv/bin/python
source scripts/lib/netns_nodes.sh
netns_nodes_available || { echo "bench/faults.sh: needs root and iproute2" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'netns_nodes_down; rm -rf "$tmp"' EXIT
netns_nodes_up 3
build/ddp-train make-data --out "$tmp/data" --train 6000 --test 500 >/dev/null

# Each line of stdin with the time it arrived (Unix seconds) in front.
stamp() { "$python" -u -c 'import sys, time
for line in sys.stdin: print(f"{time.time():.3f} {line}", end="", flush=True)'; }

start_node() { # start_node MODE I
  local mode=$1 i=$2 endpoint="${node_addr[0]}:29650"
  local common=(--nnodes 2:3 --rdzv-backend c10d --rdzv-endpoint "$endpoint" --rdzv-id faults
    --nproc-per-node 2)
  if [[ $mode == ddp.cpp* ]]; then
    local on_failure=restart
    [[ $mode == ddp.cpp-ft ]] && on_failure=continue
    ip netns exec "${node_ns[i]}" env DDP_FAULT="slow@1:0:$slow" build/ddprun "${common[@]}" \
      --on-failure $on_failure -- \
      build/ddp-train --data-dir "$tmp/data" --epochs 3 --batch-size 16 --no-eval --log-every 1 \
      --checkpoint-dir "$tmp/ck-$mode" --checkpoint-every-steps 10 2>&1 | stamp >>"$tmp/$mode.$i.log" &
  else
    # torchrun and PyTorch's Gloo go by the machine's host name, which the namespaces share:
    # node 0 is told that it hosts the store, and each node its own address and interface.
    ip netns exec "${node_ns[i]}" env GLOO_SOCKET_IFNAME="${node_if[i]}" \
      "$python" -m torch.distributed.run "${common[@]}" \
      --rdzv-conf "is_host=$((i == 0))" --local-addr "${node_addr[i]}" --max-restarts 3 bench/faults_reference.py --data-dir "$tmp/data" --epochs 3 \
      --batch-size 16 --slow-ms "$slow" --checkpoint-dir "$tmp/ck-$mode" 2>&1 |
      stamp >"$tmp/$mode.$i.log" &
  fi
}

run() { # run MODE: the job, node 2 killed at epoch 2 step 20; the kill's time in $tmp/MODE.kill
  local mode=$1 i
  for i in 0 1 2; do start_node "$mode" $i; done
  for _ in $(seq 1800); do # at most 3 minutes to reach the step
    grep -q "epoch 2 step 20/" "$tmp/$mode.0.log" "$tmp/$mode.1.log" 2>/dev/null && break
    sleep 0.1
  done
  date +%s.%N >"$tmp/$mode.kill"
  netns_node_pids 2 | xargs -r kill -KILL
  if [[ $mode == ddp.cpp-ft ]]; then # node 2 again, once its place in the round is free
    for _ in $(seq 600); do grep -q "its place is free" "$tmp/$mode".[01].log && break; sleep 0.1; done
    date +%s.%N >"$tmp/$mode.rejoin"
    start_node "$mode" 2
  fi
  # At most 5 minutes more (the rest of the job takes under one): a job that has not recovered
  # by then is stopped, and its row says so.
  for _ in $(seq 3000); do [[ -z $(jobs -rp) ]] && break; sleep 0.1; done
  for i in 0 1 2; do netns_node_pids $i | xargs -r kill -KILL; done
  wait || true
}

run ddp.cpp-ft
run ddp.cpp
run torchrun
"$python" - "$tmp" <<'EOF'
import re, sys
tmp = sys.argv[1]
step = re.compile(r"^(\d+\.\d+) .*epoch (\d+) step (\d+)/(\d+)")
print(f"{'':11} {'kill to next step (s)':>22} {'progress lost (s)':>18} {'pace (s/step)':>14}"
      f" {'newcomer trains after (s)':>26}")
for mode in ["ddp.cpp-ft", "ddp.cpp", "torchrun"]:
    kill = float(open(f"{tmp}/{mode}.kill").read())
    lines = []
    for node in (0, 1):
        for line in open(f"{tmp}/{mode}.{node}.log", errors="replace"):
            m = step.match(line)
            if m:
                lines.append((float(m[1]), int(m[2]), int(m[3]), int(m[4])))
    lines.sort()
    before = [l for l in lines if l[0] <= kill]
    after = [l for l in lines if l[0] > kill]
    if len(before) < 11 or not after:
        text = "".join(open(f"{tmp}/{mode}.{n}.log", errors="replace").read() for n in (0, 1))
        ends = re.findall(r"(RendezvousClosedError|lost the rendezvous store|the job failed)", text)
        why = ends[-1] if ends else "no step within 300 s of the kill"
        print(f"{mode:11} {'never':>22} {'the job':>18}   ({why})")
        continue
    pace = (before[-1][0] - before[-11][0]) / 10
    _, e, s, n = after[0]
    # Steps trained again: from the one the run went on at to the last before the kill.
    lost_steps = (before[-1][1] - e) * before[-1][3] + before[-1][2] - (s - 1)
    lost = max(0, lost_steps) * pace
    joined = "-"
    if mode == "ddp.cpp-ft":
        rejoin = float(open(f"{tmp}/{mode}.rejoin").read())
        change = [float(l.split()[0]) for l in open(f"{tmp}/{mode}.0.log", errors="replace")
                  if "joined: j" in l and float(l.split()[0]) > rejoin]
        first = [l[0] for l in lines if change and l[0] > change[0]]
        joined = f"{first[0] - rejoin:.1f}" if first else "never"
    print(f"{mode:11} {after[0][0] - kill:22.1f} {lost:18.1f} {pace:14.3f} {joined:>26}")
EOF
