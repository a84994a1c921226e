"""PyTorch's side of bench/imagefolder_e2e.sh: DDP training of torchvision's resnet18 (or
resnet50) on an ImageFolder, on the CPU with gloo or on one GPU per rank with NCCL, launched by
torchrun (one process per rank):

  python -m torch.distributed.run --standalone --nproc-per-node 2 \\
      bench/imagefolder_reference_ddp.py --data-dir DIR [--image-size 112] [--batch-size 64]
      [--workers 1] [--max-steps 35] [--warmup-steps 5] [--lr 0.1] [--momentum 0.9]
      [--threads T] [--seed 0] [--metrics FILE] [--step-trace PREFIX]
      [--model resnet18|resnet50] [--device cpu|cuda] [--precision fp32|bf16] [--channels-last]

On a GPU (--device cuda: rank r on cuda:LOCAL_RANK) the DataLoader pins its batches, which are
copied with non_blocking as the ImageNet example does; bf16 is autocast; --channels-last puts
the model and each batch in that memory format; each step ends with a device synchronise, so
the step times are the GPU's.

ImageFolder(DIR/train) with RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(),
Normalize(ImageNet's mean and std), as pytorch/examples' imagenet/main.py (at --image-size);
DistributedSampler (shuffled, seeded) with set_epoch(0); DataLoader with batch --batch-size per
rank and --workers worker processes per rank (one intra-op thread each, as DataLoader sets it);
resnet18(num_classes = the class folders), plain BatchNorm2d (PyTorch's SyncBatchNorm has no CPU
implementation); SGD(lr, momentum), no weight decay; --threads intra-op threads per rank
(default: the cores over the ranks).

--max-steps steps in all (fewer if the epoch ends first); the data loader's iterator (its worker
processes) is made before the clock starts, as ddp-train starts its loader's epoch before its
clock. Rank 0 prints one line:
  images_per_second=X images=N seconds=S data_wait_fraction=F steady_images_per_second=X2
  steady_images=N2 steady_seconds=S2 steady_data_wait_fraction=F2 loss=L
images: over all ranks; seconds: the slowest rank's (ddp-train's epoch does the same); the data
wait: rank 0's time inside next(loader) over those seconds (ddp-train's data_wait_seconds is rank
0's too). steady_*: the same over the steps after the first --warmup-steps.

--metrics FILE appends ddp-train's epoch record fields (epoch, train_images, epoch_seconds,
images_per_second, data_wait_seconds) as a JSON line; --step-trace PREFIX writes each rank's steps
to PREFIX.RANK.csv in ddp-train's --step-trace columns (epoch,step,start,batch_ready,
forward_done,backward_done,averaged,done,cpu_seconds; averaged = backward_done here, DDP's
all-reduce overlapping the backward), so both sides' files can be read by the same code.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
import torchvision.datasets as datasets
import torchvision.models as models
import torchvision.transforms as transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, help="ImageFolder root (its train/ is read)")
    p.add_argument("--image-size", type=int, default=112)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--workers", type=int, default=1, help="DataLoader num_workers per rank")
    p.add_argument("--max-steps", type=int, default=35)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per rank (0: cores / ranks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--metrics", default="")
    p.add_argument("--step-trace", default="")
    p.add_argument("--model", choices=["resnet18", "resnet50"], default="resnet18")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--channels-last", action="store_true")
    args = p.parse_args()

    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.backends.cudnn.benchmark = True  # as imagenet/main.py
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(args.seed)

    root = os.path.join(args.data_dir, "train")
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=MEAN, std=STD),
    ])
    dataset = datasets.ImageFolder(root, transform)
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    sampler.set_epoch(0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, drop_last=False, persistent_workers=False,
                        pin_memory=cuda)
    steps = min(args.max_steps, len(loader)) if args.max_steps > 0 else len(loader)
    if rank == 0 and steps < args.max_steps:
        print(f"imagefolder_reference_ddp: the epoch has only {len(loader)} steps per rank, "
              f"not {args.max_steps}", flush=True)
    warmup = min(args.warmup_steps, steps - 1) if steps > 1 else 0

    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    net = getattr(models, args.model)(num_classes=len(dataset.classes))
    net = net.to(device, memory_format=memory_format)
    model = DDP(net, device_ids=[device.index] if cuda else None)
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    trace = None
    if args.step_trace:
        trace = open(f"{args.step_trace}.{rank}.csv", "w")
        trace.write("epoch,step,start,batch_ready,forward_done,backward_done,averaged,done,cpu_seconds\n")

    it = iter(loader)
    start = time.perf_counter()
    steady_start = start
    wait = steady_wait = 0.0
    images = steady_images = 0
    cpu = time.thread_time()
    for step in range(steps):
        t0 = time.perf_counter()
        x, y = next(it)
        x = x.to(device, non_blocking=True, memory_format=memory_format)
        y = y.to(device, non_blocking=True)
        t1 = time.perf_counter()
        with autocast:
            loss = F.cross_entropy(model(x), y)
        t2 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        t3 = time.perf_counter()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        t4 = time.perf_counter()
        wait += t1 - t0
        images += len(y)
        if step >= warmup:
            steady_wait += t1 - t0
            steady_images += len(y)
        if step + 1 == warmup:
            steady_start = t4
        if trace:
            now_cpu = time.thread_time()
            trace.write(f"1,{step + 1},{t0:.6f},{t1:.6f},{t2:.6f},{t3:.6f},{t3:.6f},{t4:.6f},"
                        f"{now_cpu - cpu:.6f}\n")
            cpu = now_cpu
    end = time.perf_counter()
    del it
    if trace:
        trace.close()
    seconds = torch.tensor([end - start, end - steady_start], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    counts = torch.tensor([images, steady_images], dtype=torch.float64, device=device)
    dist.all_reduce(counts)
    if rank == 0:
        s, ss = seconds.tolist()
        n, ns = (int(v) for v in counts.tolist())
        print(f"images_per_second={n / s:.2f} images={n} seconds={s:.3f} "
              f"data_wait_fraction={wait / s:.4f} steady_images_per_second={ns / ss:.2f} "
              f"steady_images={ns} steady_seconds={ss:.3f} steady_data_wait_fraction={steady_wait / ss:.4f} "
              f"loss={loss.item():.4f}", flush=True)
        if args.metrics:
            with open(args.metrics, "a") as f:
                f.write(json.dumps({"epoch": 1, "train_images": n, "epoch_seconds": s,
                                    "images_per_second": n / s, "data_wait_seconds": wait}) + "\n")
    del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
