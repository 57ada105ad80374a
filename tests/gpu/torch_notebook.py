"""A notebook of PyTorch cells, run by tests/gpu/mini_kernel.py under
gpushare-launch on the GPU machine (issue 5's check without Jupyter):

    torch_notebook.py CELLS STEPS [SEED]

Each cell trains a small convolutional net for STEPS steps on synthetic
data (deterministic algorithms, so the final digest is the same natively
and under the hook) and synchronises, as a notebook cell that prints a loss
does.  Between cells the notebook "thinks" for 0.3 s of host time.  Prints
one JSON line: per-cell start/end (CLOCK_MONOTONIC seconds, comparable
across processes), the loss and a digest of the weights."""
import hashlib
import json
import os
import sys
import time

import torch

from mini_kernel import cell, cells_run


def main():
    cells, steps = int(sys.argv[1]), int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(128, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (128,), device="cuda")
    losses = []
    for _ in range(cells):
        with cell():
            for _ in range(steps):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            losses.append(loss.item())  # synchronises, as printing a loss does
        time.sleep(0.3)  # the user reading the output: host time, no GPU
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    print(json.dumps({"seed": seed, "cells": [[round(a, 6), round(b, 6)] for a, b in cells_run],
                      "losses": losses, "digest": h.hexdigest()[:16], "pid": os.getpid()}))


if __name__ == "__main__":
    main()
