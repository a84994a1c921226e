"""Python's torchrun (torch.distributed.run), as `python3 -m torch.distributed.run` runs it.

Workaround, in one place: Debian 13's python3-torch 2.6 is built without libuv, yet torchrun's
static rendezvous creates its TCPStore with the default use_libuv=True (from torch 2.4 on) and
fails with "use_libuv was requested but PyTorch was build without libuv support"; USE_LIBUV=0
is not consulted on that path. Default the store to the classic server where the build lacks
libuv. Torch 1.13 (Debian 12) has no such argument and runs unchanged.
"""
import sys

import torch
import torch.distributed as dist

major, minor = (int(part) for part in torch.__version__.split(".")[:2])
if (major, minor) >= (2, 2):

    class _TCPStore(dist.TCPStore):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    dist.TCPStore = _TCPStore
    import torch.distributed.elastic.rendezvous.static_tcp_rendezvous as static_rendezvous

    static_rendezvous.TCPStore = _TCPStore

from torch.distributed.run import main

if __name__ == "__main__":
    sys.exit(main())
