"""Programs that must behave the same with the swap tier backing their
memory (GPUSHARE_SWAP=on under the hook) as natively: each prints one JSON
line of exact results, compared by run_h200.sh's `swap` section.
    swap_check.py mp       torch.multiprocessing shares a CUDA tensor with a
                           child (legacy IPC, emulated for backed memory)
    swap_check.py cupy     CuPy matrix work, exact sums
    swap_check.py jax      JAX jit, exact sums
    swap_check.py attrs    pointer attributes of a tensor's storage"""
import hashlib
import json
import sys


def mp_child(q_in, q_out):
    import torch
    t = q_in.get()
    q_out.put(float(t.double().sum()))
    t.add_(1)  # the parent must see it: the same memory
    q_out.put("done")


def check_mp():
    import torch
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    t = torch.arange(1 << 22, dtype=torch.float32, device="cuda")
    p = ctx.Process(target=mp_child, args=(q_in, q_out))
    p.start()
    q_in.put(t)
    s = q_out.get(timeout=120)
    q_out.get(timeout=120)
    p.join(60)
    torch.cuda.synchronize()
    return {"child_sum": s, "parent_sum_after": float(t.double().sum()), "exit": p.exitcode}


def check_cupy():
    import cupy as cp
    rs = cp.random.RandomState(0)
    a = rs.random_sample((2048, 2048), dtype=cp.float32)
    b = a @ a.T
    small = [cp.arange(n, dtype=cp.float32) * 3 for n in range(1, 2000, 37)]
    h = hashlib.sha256(cp.asnumpy(b).tobytes())
    for s in small:
        h.update(cp.asnumpy(s).tobytes())
    return {"digest": h.hexdigest()[:16]}


def check_jax():
    import jax
    import jax.numpy as jnp
    x = jax.random.normal(jax.random.PRNGKey(0), (2048, 2048))
    y = jax.jit(lambda a: jnp.tanh(a @ a.T))(x)
    import numpy as np
    return {"digest": hashlib.sha256(np.asarray(y).tobytes()).hexdigest()[:16]}


def check_attrs():
    import ctypes
    import torch
    t = torch.empty(20 * (1 << 20) + 100, dtype=torch.uint8, device="cuda")
    lib = ctypes.CDLL("libcuda.so.1")
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    p = t.data_ptr()
    lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(p + 10))
    ipc = ctypes.c_int(-1)
    lib.cuPointerGetAttribute(ctypes.byref(ipc), 10, ctypes.c_uint64(p))  # IS_LEGACY_CUDA_IPC_CAPABLE
    return {"offset": p - base.value, "range_size": size.value, "ipc_capable": ipc.value}


def main():
    what = sys.argv[1]
    out = {"mp": check_mp, "cupy": check_cupy, "jax": check_jax, "attrs": check_attrs}[what]()
    print(json.dumps(dict(check=what, **out)), flush=True)


if __name__ == "__main__":
    main()
