#!/usr/bin/env bash
# What a checkpoint that does not stop training costs a step: ddp-train trains torchvision's
# ResNet-18 (11.7 M parameters, SGD with momentum: 94 MB of state) on generated CIFAR-format
# data for one epoch, one process, with --checkpoint-every-steps 5 and --trace. The trace holds
# each background checkpoint's stall (the copy into memory at a step's end) and the epoch's
# synchronous save of the same state (write, fsync, rename). Prints both and their ratio; the
# target is a stall of at most 10% of the synchronous save. Repeats ROUNDS times, interleaved
# within each run, so that drift hits both alike.
# usage: bench/checkpoint_stall.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build/ddp-train make-data --out "$tmp/data" --train 800 --test 100 >/dev/null
for ((r = 1; r <= rounds; r++)); do
  rm -rf "$tmp/ck"
  build/ddp-train --data-dir "$tmp/data" --model resnet18 --epochs 1 --batch-size 16 --no-eval \
    --checkpoint-dir "$tmp/ck" --checkpoint-every-steps 5 --trace "$tmp/trace-$r.json" >/dev/null
done
.venv/bin/python - "$tmp" "$rounds" <<'EOF'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'run':>4} {'stall (ms, median of N)':>24} {'synchronous save (ms)':>22} {'ratio':>7}")
ratios = []
for r in range(1, rounds + 1):
    events = json.load(open(f"{tmp}/trace-{r}.json"))
    events = events["traceEvents"] if isinstance(events, dict) else events
    stalls = [e["dur"] / 1000 for e in events if e.get("name", "").startswith("checkpoint snapshot")]
    saves = [e["dur"] / 1000 for e in events if e.get("name", "").startswith("checkpoint of epoch")]
    stall, save = statistics.median(stalls), saves[0]
    ratios.append(stall / save)
    print(f"{r:>4} {stall:17.1f} (N={len(stalls):2}) {save:22.1f} {stall / save:7.3f}")
print(f"median ratio {statistics.median(ratios):.3f} (target: at most 0.10)")
EOF
