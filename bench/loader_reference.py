"""PyTorch's side of the loader benchmark (bench/loader.sh): torchvision's ImageFolder with the
transforms of pytorch/examples' imagenet/main.py on PIL images, through torch's DataLoader.

usage: loader_reference.py --dir DIR --pipeline train|eval [--workers W] [--images N]
                           [--warmup-batches K] [--batch-size 64] [--seed 0]

train: ImageFolder(DIR/train) with RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
       Normalize(ImageNet's mean and std); DataLoader shuffle=True (seeded by --seed).
eval:  ImageFolder(DIR/val) with Resize(256), CenterCrop(224), ToTensor(), Normalize(...);
       shuffle=False.
Both: batch_size 64, num_workers W (0: the main process decodes), drop_last=False,
persistent_workers=False, pin_memory=False (CPU only). Each worker runs one intra-op thread, as
DataLoader sets it; so does the main process here, so that W=0 uses one core.

The first K batches (default 2: the workers' start and the pipeline's filling) are not timed;
then the clock runs over the next ceil(N/64) batches (fewer where the data set ends first: a
warning says so). Prints one line:
  images_per_second=1234.5 images=N seconds=S
"""
import argparse
import math
import os
import sys
import time

import torch
from torch.utils.data import DataLoader
import torchvision.datasets as datasets
import torchvision.transforms as transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_loader(args):
    normalize = transforms.Normalize(mean=MEAN, std=STD)
    if args.pipeline == "train":
        root = os.path.join(args.dir, "train")
        transform = transforms.Compose([
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            normalize,
        ])
    else:
        root = os.path.join(args.dir, "val")
        transform = transforms.Compose([
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            normalize,
        ])
    dataset = datasets.ImageFolder(root, transform)
    generator = torch.Generator()
    generator.manual_seed(args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=args.pipeline == "train",
                        num_workers=args.workers, drop_last=False, persistent_workers=False,
                        pin_memory=False, generator=generator)
    return dataset, loader


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True, help="ImageFolder root with train/ and val/")
    p.add_argument("--pipeline", required=True, choices=["train", "eval"])
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--images", type=int, default=1024, help="time about this many images")
    p.add_argument("--warmup-batches", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the main process's transforms when W=0
    dataset, loader = make_loader(args)
    timed_batches = max(1, math.ceil(args.images / args.batch_size))
    # With K=0 the clock includes starting the workers (the iterator's creation).
    start = time.perf_counter() if args.warmup_batches == 0 else None
    it = iter(loader)
    images = batches = 0
    for batch_index, (x, _) in enumerate(it):
        if batch_index < args.warmup_batches:
            if batch_index + 1 == args.warmup_batches:
                start = time.perf_counter()
            continue
        images += x.shape[0]
        batches += 1
        if batches == timed_batches:
            break
    seconds = time.perf_counter() - start if start is not None else 0.0
    del it
    if batches < timed_batches:
        print(f"loader_reference: warning: {len(dataset)} images give only {batches} timed "
              f"batches after {args.warmup_batches} warm-up ones, not {timed_batches}",
              file=sys.stderr)
    if images == 0 or seconds <= 0:
        sys.exit("loader_reference: no batch was timed (too few images for --warmup-batches)")
    print(f"images_per_second={images / seconds:.1f} images={images} seconds={seconds:.3f}",
          flush=True)


if __name__ == "__main__":
    main()
