#!/usr/bin/env python3
"""Summarises ddp-train --step-trace files: where a synchronised step's time goes.

usage: tools/step_trace.py RUN [RUN...]
  RUN is LABEL=PREFIX[,PREFIX...] (or a bare PREFIX): the --step-trace prefixes of one or more
  runs of the same kind, whose figures are combined by their median. Prints one table row per RUN.

For ranks that wait for each other every step (DDP, --lockstep-baseline):
  spread   how far apart the ranks' own backwards end (max - min over ranks, mean over steps):
           what the earlier rank waits for the later one.
  latency  from the last rank's own backward end to the averaged gradients, per rank and step
           (median and 90th percentile): what the collective itself adds once everyone is there.
For free-running ranks (--no-sync-baseline):
  replay   what lock step would cost with these very step times: each step as long as its slowest
           rank, against the slowest rank's total.
For every run:
  pace     the job's step time once warmed up: from the start of the first step counted to the end
           of the last, per step, on the slowest rank (the first steps, which build oneDNN's
           kernels and fault in the heap, are left out).
  compute  a rank's own forward and backward (batch in hand to its gradients), mean over ranks
           and steps: whether running in step slows the work itself.
  cpu ratio  the slowest rank's CPU time per step over the fastest's (one vCPU slower than the
           other shows here; in step, a wait that polls counts as CPU time and evens it out).
"""
import csv
import glob
import statistics
import sys


def read_ranks(prefix):
    """{rank: {(epoch, step): row}} for PREFIX.RANK.csv."""
    ranks = {}
    for path in sorted(glob.glob(glob.escape(prefix) + ".*.csv")):
        rank = path[len(prefix) + 1 : -len(".csv")]
        if not rank.isdigit():
            continue
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        ranks[int(rank)] = {(r["epoch"], r["step"]): {k: float(v) for k, v in r.items()} for r in rows}
    if len(ranks) < 2:
        sys.exit(f"step_trace.py: need the files of at least 2 ranks at {prefix}.RANK.csv")
    return ranks


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * (len(values) - 1) + 0.5))]


def summarise(prefix):
    ranks = read_ranks(prefix)
    keys = sorted(set.intersection(*(set(r) for r in ranks.values())), key=lambda k: (int(k[0]), int(k[1])))
    keys = keys[min(5, len(keys) // 10) :]  # the first steps warm caches and allocators
    if not keys:
        sys.exit(f"step_trace.py: the ranks at {prefix} have no step in common")
    steps = [[r[k] for r in ranks.values()] for k in keys]  # steps[i][rank]
    duration = lambda row: row["done"] - row["start"]
    cpu = [statistics.mean(s[i]["cpu_seconds"] for s in steps) for i in range(len(ranks))]
    pace = [(steps[-1][i]["done"] - steps[0][i]["start"]) / len(steps) for i in range(len(ranks))]
    figures = {
        "step_ms": 1000 * statistics.mean(duration(row) for s in steps for row in s),
        "pace_ms": 1000 * max(pace),
        "compute_ms": 1000
        * statistics.mean(row["backward_done"] - row["batch_ready"] for s in steps for row in s),
        "cpu_ratio": max(cpu) / min(cpu) if min(cpu) > 0 else float("nan"),
    }
    synchronised = any(row["averaged"] - row["backward_done"] > 1e-5 for s in steps for row in s)
    if synchronised:
        last = [max(row["backward_done"] for row in s) for s in steps]
        latency = [1000 * (row["averaged"] - t) for s, t in zip(steps, last) for row in s]
        figures["spread_ms"] = statistics.mean(
            1000 * (t - min(row["backward_done"] for row in s)) for s, t in zip(steps, last)
        )
        figures["latency_median_ms"] = percentile(latency, 0.5)
        figures["latency_p90_ms"] = percentile(latency, 0.9)
    else:
        in_step = sum(max(duration(row) for row in s) for s in steps)
        alone = max(sum(duration(s[i]) for s in steps) for i in range(len(ranks)))
        figures["replay"] = in_step / alone - 1
    return figures


def main(runs):
    if not runs or any(a in ("-h", "--help") for a in runs):
        print(__doc__.strip())
        return 0 if runs else 2
    print(
        "| run | step ms | pace ms | compute ms | cpu ratio | spread ms | latency median ms "
        "| latency p90 ms | replay |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        label, _, prefixes = run.rpartition("=")
        summaries = [summarise(p) for p in prefixes.split(",")]
        label = label or prefixes

        def cell(key, form):
            values = [s[key] for s in summaries if key in s]
            return form.format(statistics.median(values)) if values else "-"

        print(
            f"| {label} | {cell('step_ms', '{:.2f}')} | {cell('pace_ms', '{:.2f}')} "
            f"| {cell('compute_ms', '{:.2f}')} | {cell('cpu_ratio', '{:.3f}')} "
            f"| {cell('spread_ms', '{:.2f}')} | {cell('latency_median_ms', '{:.2f}')} "
            f"| {cell('latency_p90_ms', '{:.2f}')} | {cell('replay', '{:+.1%}')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
