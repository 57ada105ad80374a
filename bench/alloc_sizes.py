"""What backing device allocations with 2 MiB virtual-memory granules would
waste, for PyTorch, CuPy and JAX (issue 14: decide whether small allocations
are suballocated or stay resident).

Each framework runs a small representative workload in its own process and
reports the sizes of the allocations its allocator asked the driver for
(PyTorch: the caching allocator's segments; CuPy: the pool's underlying
allocations through a MemoryHook; JAX: the BFC allocator's regions, with and
without preallocation).  One JSON line per framework:
  {"framework", "allocs", "bytes", "bytes_2mib", "waste", "small_allocs",
   "small_bytes"}  (small: below 2 MiB)
Run on the GPU machine: python3 bench/alloc_sizes.py
"""
import json
import os
import subprocess
import sys

GRAN = 2 << 20


def summarise(name, sizes, extra=None):
    rounded = sum((s + GRAN - 1) // GRAN * GRAN for s in sizes)
    total = sum(sizes)
    small = [s for s in sizes if s < GRAN]
    out = {"framework": name, "allocs": len(sizes), "bytes": total, "bytes_2mib": rounded,
           "waste": round((rounded - total) / total, 4) if total else 0,
           "small_allocs": len(small), "small_bytes": sum(small),
           "largest": max(sizes) if sizes else 0}
    out.update(extra or {})
    print(json.dumps(out), flush=True)


def torch_workload():
    import torch
    m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.Adam(m.parameters())
    for step in range(20):
        x = torch.randn(256 + step, 1024, device="cuda")
        loss = m(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    small = [torch.randn(n, device="cuda") for n in range(1, 3000, 7)]  # many small tensors
    big = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    sizes = [s["total_size"] for s in torch.cuda.memory_snapshot()]
    del small, big
    summarise("torch", sizes)


def cupy_workload():
    import cupy
    sizes = []

    class Hook(cupy.cuda.MemoryHook):
        name = "sizes"

        def alloc_preprocess(self, **kw):
            sizes.append(kw["mem_size"])

    with Hook():
        a = cupy.random.random((4096, 4096), dtype=cupy.float32)
        for _ in range(5):
            a = a @ a.T
            a /= cupy.linalg.norm(a)
        small = [cupy.arange(n) for n in range(1, 3000, 7)]
        fft = cupy.fft.fft(cupy.random.random(1 << 20))
        cupy.cuda.Device().synchronize()
        del small, fft
    summarise("cupy", sizes)


def jax_workload(prealloc):
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true" if prealloc else "false"
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (4096, 4096))
    f = jax.jit(lambda a: jnp.tanh(a @ a.T).sum(axis=0))
    for _ in range(5):
        y = f(x).block_until_ready()
    small = [jnp.arange(n) for n in range(1, 3000, 7)]
    jax.block_until_ready(small)
    st = jax.devices()[0].memory_stats() or {}
    # BFC: bytes_reserved/pool_bytes is what it took from the driver, in
    # regions; the count of regions is not exported, so report the pool.
    pool = st.get("pool_bytes") or st.get("bytes_reserved") or st.get("bytes_limit", 0)
    summarise("jax-prealloc" if prealloc else "jax-growth", [pool] if pool else [],
              {"memory_stats": {k: v for k, v in st.items() if isinstance(v, int)}})
    del y, small


def main():
    if len(sys.argv) > 1:
        what = sys.argv[1]
        {"torch": torch_workload, "cupy": cupy_workload,
         "jax-prealloc": lambda: jax_workload(True),
         "jax-growth": lambda: jax_workload(False)}[what]()
        return
    for what in ("torch", "cupy", "jax-prealloc", "jax-growth"):
        try:
            r = subprocess.run([sys.executable, __file__, what], capture_output=True, text=True,
                               timeout=180)
            sys.stdout.write(r.stdout)
            if r.returncode:
                print(json.dumps({"framework": what, "error": r.stderr.strip()[-400:]}))
        except subprocess.TimeoutExpired:
            print(json.dumps({"framework": what, "error": "timeout"}))


if __name__ == "__main__":
    main()
