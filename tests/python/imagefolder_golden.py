"""What torchvision makes of an ImageFolder, for the C++ tests to compare with.

usage:
  imagefolder_golden.py --dir DIR [--load]
      prints JSON: {"classes": [...], "class_to_idx": {...}, "samples": [[path, label], ...],
      "relative_samples": [[path relative to DIR, label], ...]}, as
      torchvision.datasets.ImageFolder(DIR) lists them (paths spelled from DIR as given).
      --load adds "loads": [[path, "ok WxH MODE"] or [path, "ErrorType: message"], ...]: what
      ImageFolder's loader (PIL: open, convert("RGB")) does with each file; Pillow's original
      mode is MODE. When ImageFolder(DIR) itself raises (a class without images, say), prints
      {"error": "ErrorType", "message": "..."} and exits 3.
  imagefolder_golden.py --dir DIR --transform eval [--resize 256] [--size 224]
                        [--count N | --indices I,J,...] [--no-normalize] --out FILE.pt
      torch.save's {"images": float32 [N, 3, size, size], "labels": int64 [N]} of the first N
      samples (default all) or those indices, through Resize(resize), CenterCrop(size),
      ToTensor(), Normalize(ImageNet's mean and std) (--no-normalize: without Normalize).
  imagefolder_golden.py --dir DIR --transform crop [--size 224] --boxes JSON [--no-normalize]
                        --out FILE.pt
      the same for boxes [[index, i, j, h, w, flip], ...] (JSON text, or a file holding it):
      sample `index` through F.resized_crop(img, i, j, h, w, [size, size], BILINEAR,
      antialias=True), F.hflip when flip is true, ToTensor(), Normalize(...): images [len(boxes),
      3, size, size] in the boxes' order.
"""
import argparse
import json
import os
import sys

import torch
import torchvision.datasets as datasets
import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def listing(dataset, root, load):
    out = {
        "classes": dataset.classes,
        "class_to_idx": dataset.class_to_idx,
        "samples": [[path, label] for path, label in dataset.samples],
        "relative_samples": [[os.path.relpath(path, root), label] for path, label in dataset.samples],
    }
    if load:
        loads = []
        for path, _ in dataset.samples:
            try:
                from PIL import Image
                with open(path, "rb") as f:
                    mode = Image.open(f).mode
                img = dataset.loader(path)
                loads.append([path, f"ok {img.width}x{img.height} {mode}"])
            except Exception as e:  # noqa: BLE001 - the error is the answer
                loads.append([path, f"{type(e).__name__}: {e}"])
        out["loads"] = loads
    return out


def finish(img, normalize):
    t = F.to_tensor(img)
    return F.normalize(t, MEAN, STD) if normalize else t


def read_boxes(text):
    if os.path.exists(text):
        with open(text) as f:
            text = f.read()
    boxes = json.loads(text)
    for b in boxes:
        if len(b) != 6:
            sys.exit(f"imagefolder_golden: a box is [index, i, j, h, w, flip], not {b}")
    return boxes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--load", action="store_true")
    ap.add_argument("--transform", choices=["eval", "crop"])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--indices", default="")
    ap.add_argument("--boxes", default="")
    ap.add_argument("--no-normalize", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    try:
        dataset = datasets.ImageFolder(args.dir)
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
        sys.exit(3)
    if not args.transform:
        print(json.dumps(listing(dataset, args.dir, args.load), indent=1, ensure_ascii=False))
        return
    if not args.out:
        sys.exit("imagefolder_golden: --transform needs --out FILE.pt")
    normalize = not args.no_normalize
    images, labels = [], []
    if args.transform == "eval":
        if args.indices:
            indices = [int(i) for i in args.indices.split(",")]
        else:
            n = len(dataset) if args.count <= 0 else min(args.count, len(dataset))
            indices = list(range(n))
        resize = T.Resize(args.resize)  # BILINEAR, antialiased (as Pillow always is)
        crop = T.CenterCrop(args.size)
        for index in indices:
            path, label = dataset.samples[index]
            images.append(finish(crop(resize(dataset.loader(path))), normalize))
            labels.append(label)
    else:
        if not args.boxes:
            sys.exit("imagefolder_golden: --transform crop needs --boxes")
        for index, i, j, h, w, flip in read_boxes(args.boxes):
            path, label = dataset.samples[index]
            img = F.resized_crop(dataset.loader(path), i, j, h, w, [args.size, args.size],
                                 InterpolationMode.BILINEAR, antialias=True)
            if flip:
                img = F.hflip(img)
            images.append(finish(img, normalize))
            labels.append(label)
    result = {
        "images": torch.stack(images) if images else torch.zeros(0, 3, args.size, args.size),
        "labels": torch.tensor(labels, dtype=torch.int64),
    }
    torch.save(result, args.out)
    print(f"wrote {len(labels)} images of {args.size}x{args.size} to {args.out}")


if __name__ == "__main__":
    main()
