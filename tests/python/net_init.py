"""Writes Python's initial Net weights: torch.manual_seed(SEED); Net(C, SIDE).state_dict().

usage: net_init.py OUT.pt SEED C SIDE
Also stores the logits of a fixed input under "logits" (input: arange-based, see below).
"""
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from reference_net import Net  # noqa: E402

out, seed, channels, side = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(seed)
net = Net(channels, side)
state = {k: v.clone() for k, v in net.state_dict().items()}
x = (torch.arange(2 * channels * side * side, dtype=torch.float32) % 255 / 255).reshape(2, channels, side, side)
with torch.no_grad():
    state["logits"] = net(x)
torch.save(state, out)
