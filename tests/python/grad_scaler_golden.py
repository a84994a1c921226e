"""Writes torch.amp.GradScaler's trajectory over 200 steps of a small regression on CPU, one
line per step ("step loss stepped scale growth_tracker"), then "weights v...": SGD with
momentum, the gradients unscaled before clipping, an inf in the input every 37th step (from the
5th) so that steps are skipped and the scale backs off, and a growth interval of 10 so that it
grows. tests/amp/grad_scaler_test.cpp runs the same with ddp::GradScaler."""
import sys

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
weight = (torch.randn(4, 8) * 0.1).requires_grad_()
bias = torch.zeros(4, requires_grad=True)
optimizer = torch.optim.SGD([weight, bias], lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=10)
lines = []
for step in range(200):
    x = torch.randn(16, 8)
    y = torch.randn(16, 4)
    if step % 37 == 5:
        x[0, 0] = float("inf")
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(x @ weight.t() + bias, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_([weight, bias], 1.0)
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    stepped = 0 if scaler.get_scale() < before else 1
    lines.append(f"{step} {loss.item():.9g} {stepped} {scaler.get_scale():.9g} "
                 f"{scaler.state_dict()['_growth_tracker']}")
values = torch.cat([weight.detach().flatten(), bias.detach()])
lines.append("weights " + " ".join(f"{v:.9g}" for v in values.tolist()))
with open(sys.argv[1], "w") as out:
    out.write("\n".join(lines) + "\n")
