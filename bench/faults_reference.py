"""PyTorch's elastic DDP as bench/faults.sh runs it under torchrun (--rdzv-backend c10d,
--max-restarts): the reference program's Net, data and optimizer, a checkpoint at each epoch's end
(rank 0; written, then renamed) and a resume from the newest one at start, the usual way of a
torchrun job. Rank 0 prints one line per step as ddp-train does, 'epoch E step S/N loss L'.

usage: torchrun ... faults_reference.py --data-dir DIR --checkpoint-dir DIR [--epochs 3]
                                        [--batch-size 16] [--slow-ms 0]
"""
import argparse
import glob
import os
import re
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from reference_ddp import ImageSet, Net, load_cifar


def newest_checkpoint(directory):
    found = [(int(re.search(r"epoch-(\d+)\.pt$", p).group(1)), p)
             for p in glob.glob(os.path.join(directory, "epoch-*.pt"))]
    return max(found) if found else (0, None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", required=True)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--slow-ms", type=int, default=0, help="rank 0 sleeps this long every step")
    args = p.parse_args()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // local_world))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    done, path = newest_checkpoint(args.checkpoint_dir)
    if path:
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if rank == 0:
            print(f"resumed from {path} after epoch {done}", flush=True)
    images, labels = load_cifar(args.data_dir, True)
    data = ImageSet(images, labels)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    for epoch in range(done + 1, args.epochs + 1):
        sampler.set_epoch(epoch - 1)
        for step, (x, y) in enumerate(loader):
            if rank == 0 and args.slow_ms:
                time.sleep(args.slow_ms / 1000)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if rank == 0:
                print(f"epoch {epoch} step {step + 1}/{len(loader)} loss {loss.item():.4f}", flush=True)
        if rank == 0:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            final = os.path.join(args.checkpoint_dir, f"epoch-{epoch}.pt")
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()},
                       final + ".tmp")
            os.replace(final + ".tmp", final)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
