"""A manual check of the hook's kernel bursts and memory accounting on a
real GPU with PyTorch (not run by make check): burst lengths against the
program's own CUDA event timings, CUDA graph captures (global mode) while
the burst monitor is probing, the hook's footprint against PyTorch's.

    LD_PRELOAD=libhook/.libs/libgpushare-hook.so GPUSHARE_IDLE_RELEASE_MS=0 \
        [PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True] python3 tests/hook/gpu_burst_check.py

with a broker running (bursts are measured only when gated).  Prints one
JSON line; see libhook/README.md for what it showed on an H200."""
import ctypes
import json
import os
import time

import torch

hook = ctypes.CDLL(None)
out = {"alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}


def bursts():
    p90, last = ctypes.c_longlong(), ctypes.c_longlong()
    r = hook.gpushare_hook_bursts(0, ctypes.byref(p90), ctypes.byref(last))
    return r, p90.value, last.value


def mem():
    u, m, p = ctypes.c_ulonglong(), ctypes.c_ulonglong(), ctypes.c_ulonglong()
    hook.gpushare_hook_memory(0, ctypes.byref(u), ctypes.byref(m), ctypes.byref(p))
    return {"hook_used": u.value, "hook_peak": p.value,
            "torch_reserved": torch.cuda.memory_reserved(),
            "torch_max_reserved": torch.cuda.max_memory_reserved()}


x = torch.randn(8192, 8192, device="cuda")
torch.cuda.synchronize()
time.sleep(0.05)
res = []
for n in [1, 4, 16, 64, 2, 32]:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        y = x @ x
    e.record()
    torch.cuda.synchronize()
    time.sleep(0.03)
    r, p90, last = bursts()
    res.append({"n": n, "events_us": round(s.elapsed_time(e) * 1000), "hook_last_us": last,
                "hook_p90_us": p90, "found": r})
out["bursts"] = res
# short launches with a synchronisation after each: one burst (gaps < 100 us?)
t0 = time.monotonic()
for _ in range(200):
    y = x[:64] @ x[:, :64]
    torch.cuda.synchronize()
out["sync_loop_wall_us"] = round((time.monotonic() - t0) * 1e6)
time.sleep(0.03)
out["sync_loop_burst"] = bursts()
# a CUDA graph captured while the monitor may probe (side stream, warm-up)
g = torch.cuda.CUDAGraph()
a = torch.randn(4096, 4096, device="cuda")
st = torch.cuda.Stream()
st.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(st):
    for _ in range(3):
        b = a @ a
torch.cuda.current_stream().wait_stream(st)
big = x @ x  # work in flight while capturing
with torch.cuda.graph(g):
    b = a @ a
for _ in range(10):
    g.replay()
torch.cuda.synchronize()
out["graph_ok"] = bool(torch.allclose(b, a @ a))
# capture (global mode) while a long burst is queued: the monitor is polling
oks = []
for i in range(5):
    for _ in range(8):
        big = x @ x
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.stream(st):
        with torch.cuda.graph(g2, stream=st):
            b2 = a @ a
    g2.replay()
    torch.cuda.synchronize()
    oks.append(bool(torch.allclose(b2, a @ a)))
out["capture_during_burst"] = oks
time.sleep(0.03)
out["graph_burst"] = bursts()
out["mem_before_free"] = mem()
del x, y, big, b, a, g, g2, b2
torch.cuda.empty_cache()
torch.cuda.synchronize()
out["mem_after_empty_cache"] = mem()
print(json.dumps(out))
