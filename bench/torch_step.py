"""Time a training step of a ResNet-50-sized model (torchvision resnet50,
synthetic ImageNet-shaped data, bf16 autocast, channels-last) and an
inference step; prints one JSON line.  Run natively and under
libgpushare-hook.so, interleaved, to get the hook's cost side by side.
    torch_step.py [steps] [batch]"""
import json
import sys

import torch
import torchvision


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def timed(fn, n):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / n

    train_ms = timed(train_step, steps)
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        infer_ms = timed(lambda: model(x), steps)
    print(json.dumps({"train_step_ms": round(train_ms, 3), "infer_step_ms": round(infer_ms, 3),
                      "batch": batch, "steps": steps}))


if __name__ == "__main__":
    main()
