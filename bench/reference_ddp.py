"""The reference program of design.md in Python (Debian's python3-torch): the tutorial's Net,
ToTensor per sample through a Dataset, DistributedSampler with set_epoch, gloo, mp.spawn workers,
SGD(lr=0.001, momentum=0.9), batch 64 per rank. Prints training images/s and test accuracy.

usage: reference_ddp.py [--dataset cifar10|fashion-mnist] [--data-dir DIR] [--world-size 4]
                        [--epochs 1] [--max-steps N] [--threads T] [--port P] [--no-eval]
                        [--no-sync] [--device cpu|cuda] [--batch-size 64] [--precision fp32|bf16]

--device cuda puts rank r on GPU r (r modulo the GPUs visible) with the NCCL backend, as the
tutorial does; --precision bf16 runs the forward pass under torch.autocast.

--no-sync trains the same processes without DDP (no gradient communication), for measuring
PyTorch's own DDP overhead the way bench/ddp_overhead.sh measures ddp-train's. The seconds printed
are the slowest rank's, since ranks that do not wait for each other drift apart.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler
import torchvision.transforms as T

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from reference_net import Net  # noqa: E402


def load_cifar(root, train):
    if os.path.isdir(os.path.join(root, "cifar-10-batches-bin")):
        root = os.path.join(root, "cifar-10-batches-bin")
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if train else ["test_batch.bin"]
    raw = np.concatenate([np.fromfile(os.path.join(root, n), dtype=np.uint8).reshape(-1, 3073) for n in names])
    return raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), raw[:, 0].astype(np.int64)


def load_idx(root, train):
    prefix = "train" if train else "t10k"

    def read(name):
        path = os.path.join(root, name)
        opener = gzip.open if os.path.exists(path + ".gz") else open
        with opener(path + ".gz" if os.path.exists(path + ".gz") else path, "rb") as f:
            return f.read()

    images = np.frombuffer(read(f"{prefix}-images-idx3-ubyte"), dtype=np.uint8, offset=16).reshape(-1, 28, 28, 1)
    labels = np.frombuffer(read(f"{prefix}-labels-idx1-ubyte"), dtype=np.uint8, offset=8).astype(np.int64)
    return images, labels


class ImageSet(Dataset):
    def __init__(self, images, labels):
        self.images, self.labels, self.to_tensor = images, labels, T.ToTensor()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.to_tensor(self.images[i]), int(self.labels[i])


def worker(rank, args):
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=args.world_size)
    load = load_cifar if args.dataset == "cifar10" else load_idx
    train = ImageSet(*load(args.data_dir, True))
    test = ImageSet(*load(args.data_dir, False))
    torch.manual_seed(0)
    channels, side = (3, 32) if args.dataset == "cifar10" else (1, 28)
    net = Net(channels, side).to(device)
    model = net if args.no_sync else DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    sampler = DistributedSampler(train)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start, images = time.perf_counter(), 0
        for step, (x, y) in enumerate(loader):
            if args.max_steps and step >= args.max_steps:
                break
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            with autocast:
                logits = model(x)
            F.cross_entropy(logits.float(), y).backward()
            opt.step()
            images += len(y)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        # The job's epoch ends with its slowest rank's (as ddp-train reports it).
        seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        seconds = seconds.item()
        total = torch.tensor([images], dtype=torch.float64, device=device)
        dist.all_reduce(total)
        correct = torch.zeros(2, dtype=torch.float64, device=device)
        if not args.no_eval:
            n = len(test)
            idx = range(n * rank // args.world_size, n * (rank + 1) // args.world_size)
            with torch.no_grad():
                for b in DataLoader(torch.utils.data.Subset(test, list(idx)), batch_size=256):
                    b = [t.to(device) for t in b]
                    correct[0] += (net(b[0]).argmax(1) == b[1]).sum()
                    correct[1] += len(b[1])
            dist.all_reduce(correct)
        if rank == 0:
            acc = 100 * correct[0].item() / max(correct[1].item(), 1)
            print(f"reference epoch {epoch + 1}: {total.item() / seconds:.1f} images/s, {seconds:.3f} s, "
                  f"test_acc {acc:.2f}%",
                  flush=True)
    # The model (DDP's reducer holds the process group) goes first: python3-torch 1.13 can
    # deadlock in ~ProcessGroupGloo when the reducer is destroyed after destroy_process_group()
    # (seen once in a worker's exit: both threads waiting on the group's mutex).
    del model, net, opt
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="cifar10", choices=["cifar10", "fashion-mnist"])
    p.add_argument("--data-dir", default="data")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--threads", type=int, default=max(1, os.cpu_count() // 4))
    p.add_argument("--port", type=int, default=23456)
    p.add_argument("--no-eval", action="store_true")
    p.add_argument("--no-sync", action="store_true", help="no DDP: the ranks train without communicating")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = p.parse_args()
    if args.world_size == 1:
        worker(0, args)
    else:
        mp.spawn(worker, args=(args,), nprocs=args.world_size)


if __name__ == "__main__":
    main()
