"""A Python reference for nanoGPT's model.py + train.py, the thing a C++ nanoGPT trainer is compared
against (losses to 1e-5). CPU only, Gloo, ranks spawned here with torch.multiprocessing.

--data-dir holds train.bin (raw little-endian uint16 tokens, nanoGPT's format). Rank 0 writes one JSON
line per optimizer step, {"step", "loss", "lr"}; with --bench it instead runs --bench-warmup
untimed steps, then --steps timed ones, and writes one {"bench": true, ...} line.

Everything that decides the numbers (module build order, init, batch sampling, lr schedule,
parameter groups, the for-loop AdamW) is fixed so a C++ implementation can reproduce it exactly.
"""
import argparse
import contextlib
import json
import math
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_embd = cfg.n_head, cfg.n_embd
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        # Construction order matters: each module's default init draws from the global RNG.
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd)))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does it
        # apply() is post-order (children before parent); the tied tensor is drawn twice (wte, lm_head).
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def get_lr(it, a):
    if it < a.warmup_steps:
        return a.lr * (it + 1) / (a.warmup_steps + 1)
    if it > a.lr_decay_steps:
        return a.min_lr
    # max(1, .) only matters when lr_decay_steps == warmup_steps, where nanoGPT divides by zero.
    ratio = (it - a.warmup_steps) / max(1, a.lr_decay_steps - a.warmup_steps)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def get_batch(data, rank, k, a):
    # One generator per (rank, micro step) so any implementation can draw the same indices.
    g = torch.Generator().manual_seed(a.seed + 1000003 * rank + 7919 * k)
    ix = torch.randint(len(data) - a.block_size, (a.batch_size,), generator=g)
    x = torch.stack([torch.from_numpy(data[i:i + a.block_size].astype(np.int64)) for i in ix.tolist()])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + a.block_size].astype(np.int64)) for i in ix.tolist()])
    return x, y


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t  # FSDP2 DTensor -> this rank's shard


def train(rank, a):
    data = np.memmap(os.path.join(a.data_dir, "train.bin"), dtype=np.uint16, mode="r")

    torch.manual_seed(a.seed)
    model = GPT(a)  # same seed on every rank -> identical weights
    if a.parallel == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (a.nproc,))  # explicit: the default would pick CUDA if present
        for block in model.transformer.h:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)

    # nanoGPT's configure_optimizers: named_parameters() already lists the tied weight once.
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=1e-8, foreach=False, fused=False)

    out = (open(a.out, "w") if a.out else sys.stdout) if rank == 0 else None
    grad_bytes = 0

    def step(it):
        nonlocal grad_bytes
        lr = get_lr(it, a)
        for group in opt.param_groups:
            group["lr"] = lr
        step_loss = 0.0
        for m in range(a.grad_accum):
            last = m == a.grad_accum - 1
            if a.parallel == "ddp":
                ctx = contextlib.nullcontext() if last else model.no_sync()
            else:
                model.set_requires_gradient_sync(last)
                ctx = contextlib.nullcontext()
            x, y = get_batch(data, rank, it * a.grad_accum + m, a)
            with ctx:
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
                (loss / a.grad_accum).backward()
            step_loss += (loss / a.grad_accum).item()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        # Grads are about to be freed; note their size now for the bench's state_bytes.
        grad_bytes = sum(local(p.grad).nbytes for p in model.parameters() if p.grad is not None)
        opt.zero_grad(set_to_none=True)
        return step_loss, lr

    if not a.bench:
        for it in range(a.steps):
            loss, lr = step(it)
            if out:
                out.write(json.dumps({"step": it, "loss": loss, "lr": lr}) + "\n")
                out.flush()
    else:
        for it in range(a.bench_warmup):
            step(it)
        dist.barrier()
        t0 = time.perf_counter()
        for it in range(a.bench_warmup, a.bench_warmup + a.steps):
            step(it)
        dist.barrier()
        seconds = time.perf_counter() - t0
        state = sum(local(p).nbytes for p in model.parameters()) + grad_bytes
        state += sum(local(t).nbytes for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
        stats = torch.tensor([state, rss], dtype=torch.int64)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        secs = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(secs, op=dist.ReduceOp.MAX)  # the slowest rank bounds throughput
        if out:
            tokens = a.batch_size * a.block_size * a.grad_accum * a.nproc * a.steps
            out.write(json.dumps({"bench": True, "parallel": a.parallel, "nproc": a.nproc,
                                  "tokens_per_s": tokens / secs.item(), "seconds": secs.item(),
                                  "state_bytes_per_rank": int(stats[0]),
                                  "peak_rss_bytes_per_rank": int(stats[1])}) + "\n")
            out.flush()
    if out and out is not sys.stdout:
        out.close()
    dist.barrier()


def worker(rank, a):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.set_num_threads(a.threads)
    train(rank, a)
    dist.destroy_process_group()
    # Skip interpreter finalization. A Gloo worker thread releases each finished Work (and the
    # Python-owned tensors it holds) after the caller has already been woken; if Py_Finalize has
    # begun by then, that thread cannot take the GIL and the process aborts ("terminate called
    # without an active exception", ~1 run in 10 here). destroy_process_group() does not join
    # those threads, so exit without finalizing; everything worth keeping is already written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", required=True)
    for name in ("n-layer", "n-head", "n-embd", "block-size", "vocab-size", "batch-size", "steps"):
        p.add_argument("--" + name, type=int, required=True)
    for name, default in (("lr", None), ("min-lr", None), ("weight-decay", 0.1), ("beta1", 0.9),
                          ("beta2", 0.95), ("grad-clip", 1.0)):  # grad-clip 0 = no clipping
        p.add_argument("--" + name, type=float, default=default, required=default is None)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--warmup-steps", type=int, required=True)
    p.add_argument("--lr-decay-steps", type=int, default=None, help="default: --steps")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--port", type=int, default=29531)
    p.add_argument("--out", default=None, help="JSON lines file (default stdout)")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--bench-warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if a.lr_decay_steps is None:
        a.lr_decay_steps = a.steps

    for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "batch_size", "grad_accum",
                 "nproc", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.steps < 0 or a.warmup_steps < 0 or a.bench_warmup < 0:
        p.error("--steps, --warmup-steps and --bench-warmup must be >= 0")
    if a.n_embd % a.n_head:
        p.error(f"--n-embd {a.n_embd} is not divisible by --n-head {a.n_head}")
    path = os.path.join(a.data_dir, "train.bin")
    if not os.path.isfile(path):
        sys.exit(f"error: {path} not found")
    size = os.path.getsize(path)
    if size % 2:
        sys.exit(f"error: {path} has an odd size ({size} bytes); expected uint16 tokens")
    if size // 2 < a.block_size + 1:
        sys.exit(f"error: {path} holds {size // 2} tokens, fewer than block_size + 1 = {a.block_size + 1}")
    data = np.memmap(path, dtype=np.uint16, mode="r")
    if int(data.max()) >= a.vocab_size:
        sys.exit(f"error: {path} has token {int(data.max())} >= --vocab-size {a.vocab_size}")
    del data

    mp.spawn(worker, args=(a,), nprocs=a.nproc, join=True)


if __name__ == "__main__":
    main()
