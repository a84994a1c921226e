"""Writes an ImageNet-like ImageFolder of JPEG photographs for the loader benchmarks.

usage: make_imagefolder.py OUT [--classes 10] [--train 100] [--val 20] [--seed S] [--quality 90]
                            [--jobs J] [--full-size]
       make_imagefolder.py OUT --cases [--bad KIND]... [--seed S]

OUT/train/<class>/<class>_<k>.JPEG (N images per class) and OUT/val/<class>/<class>_val_<k>.JPEG
(M per class), class names like ImageNet's WordNet ids (n00000000, n00000001, ...). Each image is
cut from one of the photographs scikit-image ships (skimage/data: astronaut, chelsea, coffee,
the stereo motorcycle pair, rocket, retina, Hubble's deep field, grass, gravel, brick, ...): a
random crop of a random scale and aspect, rescaled to an ImageNet-like size (the long side 300
to 500 pixels, mostly 500; 4:3 landscape most often, also 3:2, 16:9, square and portrait),
randomly mirrored, with a little brightness/colour change and a faint film grain so no two files
are alike, then saved as a baseline JPEG at --quality (90) with 4:2:0 chroma subsampling, as most
of ImageNet is. ImageNet's mean file is ~110 KB against ~45 KiB here at about the same ~0.17
megapixels: its photos were mostly saved at higher qualities (--quality 96 gives ~77 KiB). A class
draws mostly from "its" photograph with its own tint, so a network can learn something from them.
The same --seed writes byte-identical files (with the same Pillow and libjpeg); each image has
its own random stream, so the first images of a larger set are those of a smaller one.

--full-size: each image is a whole photograph instead, at its own size (from 303 x 384 to
2,000 pixels wide and more) or at 1/2 or 1/3 of it (some then under 200 pixels), mirrored,
tinted and grained as above: sizes far from ImageNet's, to measure decoding and resizing where
they are not 224-px-ish.

Prints the files written, their bytes and mean size, and the seconds taken.

--cases: instead, the small folder of every case an ImageFolder reader and its JPEG/PNG decoders
must get right as torchvision and Pillow do, with --bad KIND adding files torchvision fails on:
the tests' folder (tools/imagefolder_cases.py says what is in it).
"""
import argparse
import functools
import multiprocessing
import os
import sys
import time

import numpy as np
from PIL import Image

import imagefolder_cases  # beside this file

# The photographs (file names in skimage/data), colour ones first. Grey ones become RGB.
PHOTOS = [
    "astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "motorcycle_right.png",
    "rocket.jpg", "retina.jpg", "hubble_deep_field.jpg", "ihc.png", "color.png",
    "grass.png", "gravel.png", "brick.png", "camera.png", "coins.png", "moon.png",
]

# (width, height) over the long side, with ImageNet-like frequencies: most photos are 4:3
# landscape (500x375 is ImageNet's most common size), then 3:2, portraits, squares, wide ones.
ASPECTS = [((4, 3), 0.45), ((3, 2), 0.15), ((3, 4), 0.15), ((2, 3), 0.07), ((1, 1), 0.10),
           ((16, 9), 0.05), ((5, 4), 0.03)]


def photo_dir():
    try:
        import skimage.data
    except ImportError:
        sys.exit("make_imagefolder: scikit-image is missing: .venv/bin/python -m pip install "
                 "-r bench/requirements.txt (scripts/setup.sh does it)")
    return os.path.dirname(skimage.data.__file__)


@functools.cache  # once per process: write_class runs once per class and split
def load_photos():
    root = photo_dir()
    photos = []
    for name in PHOTOS:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            continue
        with Image.open(path) as im:
            photos.append((name, np.asarray(im.convert("RGB"))))
    if len(photos) < 4:
        sys.exit(f"make_imagefolder: found only {len(photos)} of scikit-image's photographs in {root}")
    return photos


def target_size(rng):
    aspects = [a for a, _ in ASPECTS]
    weights = np.array([w for _, w in ASPECTS])
    aw, ah = aspects[rng.choice(len(aspects), p=weights / weights.sum())]
    # The long side: 500 most of the time (as in ImageNet), else 300..499.
    long_side = 500 if rng.random() < 0.7 else int(rng.integers(300, 500))
    if aw >= ah:
        return long_side, max(1, round(long_side * ah / aw))
    return max(1, round(long_side * aw / ah)), long_side


def make_image(photos, cls, rng, full_size=False):
    # Mostly the class's own photograph, sometimes another one.
    own = cls % len(photos)
    index = own if rng.random() < 0.8 else int(rng.integers(len(photos)))
    src = photos[index][1]
    h, w = src.shape[:2]
    if full_size:
        divisor = [1, 1, 2, 3][int(rng.integers(4))]
        im = Image.fromarray(src)
        if divisor > 1:
            im = im.resize((max(8, w // divisor), max(8, h // divisor)), Image.BICUBIC)
        return finish_image(im, cls, rng)
    tw, th = target_size(rng)
    # A crop of the target's aspect covering 25%..100% of the largest such crop.
    scale = np.sqrt(rng.uniform(0.25, 1.0))
    if w * th >= h * tw:
        ch = h
        cw = h * tw / th
    else:
        cw = w
        ch = w * th / tw
    cw, ch = max(8, int(cw * scale)), max(8, int(ch * scale))
    x = int(rng.integers(0, w - cw + 1))
    y = int(rng.integers(0, h - ch + 1))
    im = Image.fromarray(src[y:y + ch, x:x + cw]).resize((tw, th), Image.BICUBIC)
    return finish_image(im, cls, rng)


def finish_image(im, cls, rng):
    """im mirrored at random, tinted for class cls, brightened and grained."""
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    a = np.asarray(im, dtype=np.float32)
    # The class's tint and this image's brightness/contrast, then a faint grain (sigma 2.5 of
    # 255): photographs carry sensor noise, which rescaled small photos lose, and the JPEG's
    # entropy-coded size (which decoding time follows) is ImageNet-like with it.
    tint = 1.0 + 0.12 * np.cos(np.array([0.0, 2.1, 4.2]) + cls * 1.7)
    gain = rng.uniform(0.8, 1.2)
    bias = rng.uniform(-20, 20)
    a = a * (tint * gain) + bias
    a += rng.normal(0.0, 2.5, size=a.shape).astype(np.float32)
    return Image.fromarray(np.clip(a + 0.5, 0, 255).astype(np.uint8))


def class_name(c):
    return f"n{c:08d}"


def write_class(out, split, split_id, c, count, seed, quality, full_size):
    """Writes class c's `count` images of `split`; returns (files, bytes, pixels)."""
    photos = load_photos()
    name = class_name(c)
    folder = os.path.join(out, split, name)
    os.makedirs(folder, exist_ok=True)
    files = total = pixels = 0
    for k in range(count):
        # One stream per image: independent of how many classes/images there are.
        rng = np.random.default_rng([seed, split_id, c, k])
        im = make_image(photos, c, rng, full_size)
        stem = f"{name}_{k}" if split == "train" else f"{name}_val_{k}"
        path = os.path.join(folder, stem + ".JPEG")
        im.save(path, "JPEG", quality=quality, subsampling=2, optimize=False)
        files += 1
        total += os.path.getsize(path)
        pixels += im.width * im.height
    return files, total, pixels


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    # The defaults make a folder to try ddp-train on (1,200 images, about 55 MB, seconds to write).
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train", type=int, default=100, help="images per class in train/")
    p.add_argument("--val", type=int, default=20, help="images per class in val/")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--jobs", type=int, default=1,
                   help="processes writing classes side by side (the files are the same)")
    p.add_argument("--full-size", action="store_true",
                   help="whole photographs at their own sizes (or 1/2, 1/3), not ImageNet-like")
    p.add_argument("--cases", action="store_true",
                   help="the tests' folder of reader and decoder cases instead of photographs")
    p.add_argument("--bad", action="append", default=[], choices=imagefolder_cases.BAD_KINDS,
                   help="with --cases: add a file torchvision fails on (repeatable)")
    args = p.parse_args()
    if args.cases:
        imagefolder_cases.write(args.out, args.bad, args.seed)
        return
    if args.bad:
        sys.exit("make_imagefolder: --bad goes with --cases")
    if args.classes < 1 or args.train < 0 or args.val < 0 or args.jobs < 1:
        sys.exit("make_imagefolder: --classes and --jobs must be >= 1, --train and --val >= 0")
    start = time.perf_counter()
    photos = load_photos()  # a missing photograph fails here, before any process starts
    splits = (("train", 0, args.train), ("val", 1, args.val))
    work = [(args.out, split, split_id, c, count, args.seed, args.quality, args.full_size)
            for split, split_id, count in splits for c in range(args.classes)]
    if args.jobs == 1:
        results = [write_class(*w) for w in work]
    else:
        with multiprocessing.Pool(args.jobs) as pool:
            results = pool.starmap(write_class, work)
    stats = {}
    for (_, split, *_), (files, total, pixels) in zip(work, results):
        f, t, px = stats.get(split, (0, 0, 0))
        stats[split] = (f + files, t + total, px + pixels)
    seconds = time.perf_counter() - start
    for split, (files, total, pixels) in stats.items():
        mean = total / files if files else 0
        mp = pixels / files / 1e6 if files else 0
        print(f"{split}: {files} files in {args.classes} classes, {total} bytes, "
              f"mean {mean / 1024:.1f} KiB, mean {mp:.3f} megapixels")
    n = sum(s[0] for s in stats.values())
    print(f"wrote {n} JPEG files (quality {args.quality}, 4:2:0) to {args.out} from "
          f"{len(photos)} photographs in {seconds:.1f} s")


if __name__ == "__main__":
    main()
