"""Loads a ddp.cpp checkpoint with torch.load's defaults (weights_only=True from PyTorch 2.6) and
prints its epoch and the names of the model's tensors: a checkpoint must load in Python without
running code.

usage: load_checkpoint.py CHECKPOINT.pt
"""
import sys

import torch

checkpoint = torch.load(sys.argv[1])
print("epoch", int(checkpoint["epoch"]))
print("model", " ".join(sorted(checkpoint["model"].keys())))
