"""The swap tier's cost on a PyTorch training step, in one process: the
same ResNet-50 step (bf16 autocast, channels-last, as bench/torch_step.py)
built and timed alternately on memory the tier backs and on plain memory
(gpushare_hook_swap_backing toggles it; the model, optimizer and data are
made anew in each phase after empty_cache, so every tensor of a phase comes
from that phase's kind of memory).  Run under the hook; prints one JSON
line per phase and a summary.  swap_ab.py [rounds] [steps] [batch]"""
import ctypes
import json
import statistics
import sys

import torch
import torchvision

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
BATCH = int(sys.argv[3]) if len(sys.argv) > 3 else 64


def phase(backed):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    hook.gpushare_hook_swap_backing(1 if backed else 0)
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(BATCH, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (BATCH,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(STEPS):
        step()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end) / STEPS
    del model, opt, x, y
    return ms


hook = ctypes.CDLL(None)
if not hasattr(hook, "gpushare_hook_swap_backing") or hook.gpushare_hook_swap_backing(1) < 0:
    sys.exit("run under libgpushare-hook.so with the swap tier available")
times = {True: [], False: []}
for r in range(ROUNDS):
    for backed in ((True, False) if r % 2 == 0 else (False, True)):
        ms = phase(backed)
        times[backed].append(ms)
        print(json.dumps({"round": r, "backed": backed, "train_step_ms": round(ms, 3)}), flush=True)
b, p = statistics.median(times[True]), statistics.median(times[False])
print(json.dumps({"summary": True, "rounds": ROUNDS, "steps": STEPS, "backed_median_ms": round(b, 3),
                  "plain_median_ms": round(p, 3), "backed_over_plain": round(b / p, 4)}))
