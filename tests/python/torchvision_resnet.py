"""torchvision's side of the ResNet interop tests (ddp/models/torchvision_resnet.h).

  torchvision_resnet.py check MODEL.pt DEPTH CLASSES OUT.pt
      Loads a state dict written by ddp.cpp into torchvision.models.resnet{DEPTH}(num_classes=
      CLASSES) with strict=True (every key and shape must match), and saves {"input", "logits"}:
      a seeded batch and the eval-mode logits torchvision computes for it.
  torchvision_resnet.py save SEED DEPTH CLASSES OUT.pt
      torch.manual_seed(SEED); saves torchvision's freshly built resnet{DEPTH}'s state dict, with
      its batch norms' running statistics made non-trivial, for ddp.cpp to load.
"""
import sys

import torch
import torchvision

mode, rest = sys.argv[1], sys.argv[2:]


def build(depth, classes):
    return getattr(torchvision.models, f"resnet{depth}")(num_classes=classes)


if mode == "check":
    path, depth, classes, out = rest[0], int(rest[1]), int(rest[2]), rest[3]
    model = build(depth, classes)
    model.load_state_dict(torch.load(path), strict=True)
    model.eval()
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        logits = model(x)
    torch.save({"input": x, "logits": logits}, out)
elif mode == "save":
    seed, depth, classes, out = int(rest[0]), int(rest[1]), int(rest[2]), rest[3]
    torch.manual_seed(seed)
    model = build(depth, classes)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    torch.save(model.state_dict(), out)
else:
    sys.exit(f"unknown mode {mode}")
