"""The GPU memory a PyTorch process keeps when it holds no tensors: its CUDA
context, cuBLAS's and the allocator's own, after the same work a parking
run's cell does (a matmul).  What a parked process keeps on the GPU is
compared with this.  Runs natively (no hook); prints one JSON object.
    context_footprint.py"""
import json
import os
import subprocess

import torch


def used_mib(pid):
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True)
    for row in smi.stdout.splitlines():
        p, mib = (x.strip() for x in row.split(","))
        if int(p) == pid:
            return int(mib)
    return None


def main():
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    bare = used_mib(os.getpid())
    a = torch.randn(8192, 8192, device="cuda")
    for _ in range(3):
        a = a @ a
    torch.cuda.synchronize()
    del a, x
    torch.cuda.empty_cache()
    after = used_mib(os.getpid())
    print(json.dumps({"what": "context", "bare_context_mib": bare,
                      "context_after_matmul_mib": after}), flush=True)


if __name__ == "__main__":
    main()
