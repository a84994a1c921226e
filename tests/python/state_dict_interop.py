"""Python's side of the state-dict interop tests.

  state_dict_interop.py save SEED C SIDE OUT.pt
      torch.manual_seed(SEED); torch.save(Net(C, SIDE).state_dict(), OUT.pt)
  state_dict_interop.py predict MODEL.pt CIFAR_DIR OUT.txt
      net.load_state_dict(torch.load(MODEL.pt)); writes the argmax for every test image of the
      CIFAR-format test_batch.bin, one per line, then the mean cross-entropy on the last line.
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from reference_net import Net  # noqa: E402

mode = sys.argv[1]
if mode == "save":
    seed, channels, side, out = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.manual_seed(seed)
    torch.save(Net(channels, side).state_dict(), out)
elif mode == "predict":
    model, cifar, out = sys.argv[2], sys.argv[3], sys.argv[4]
    net = Net()
    net.load_state_dict(torch.load(model))
    net.eval()
    raw = np.fromfile(cifar + "/cifar-10-batches-bin/test_batch.bin", dtype=np.uint8).reshape(-1, 3073)
    labels = torch.from_numpy(raw[:, 0].astype(np.int64))
    images = torch.from_numpy(raw[:, 1:].reshape(-1, 3, 32, 32).copy()).float().div(255)
    with torch.no_grad():
        logits = net(images)
    with open(out, "w") as f:
        for p in logits.argmax(1).tolist():
            f.write(f"{p}\n")
        f.write(f"{F.cross_entropy(logits, labels).item():.6f}\n")
else:
    sys.exit(f"unknown mode {mode}")
