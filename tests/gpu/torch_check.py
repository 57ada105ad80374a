"""PyTorch training and inference with fixed seeds and deterministic
algorithms; prints one JSON line of exact checksums (float bits) so a run
under libgpushare-hook.so can be compared with a native run, plus the
kernel launches the hook saw (when preloaded)."""
import ctypes
import hashlib
import json
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def train(steps):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.AvgPool2d(8), nn.Flatten(), nn.Linear(64 * 16, 256), nn.ReLU(),
        nn.Linear(256, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 3, 32, 32, device="cuda", generator=g)
        y = torch.randint(0, 10, (64,), device="cuda", generator=g)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return digest(list(model.parameters())), float(torch.stack(losses)[-1])


def infer(batches):
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=4).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(3)
    outs = []
    with torch.no_grad():
        for _ in range(batches):
            outs.append(model(torch.randn(8, 128, 256, device="cuda", generator=g)).sum())
    return digest(outs)


def main():
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    params, last_loss = train(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
    inference = infer(20)
    torch.cuda.synchronize()
    me = ctypes.CDLL(None)
    try:
        hook_launches = me.gpushare_hook_launch_count
        hook_launches.restype = ctypes.c_longlong
        hooked = hook_launches()
    except AttributeError:
        hooked = -1
    print(json.dumps({"train_params": params, "train_last_loss": last_loss,
                      "inference": inference, "hook_kernel_launches": hooked,
                      "torch": torch.__version__, "cuda": torch.version.cuda}))


if __name__ == "__main__":
    main()
