"""CUDA IPC under the hook on a real GPU (issue 34, item 4): PyTorch shares
a CUDA tensor with a spawned child (torch.multiprocessing: cudaIpcGetMemHandle
in the parent, cudaIpcOpenMemHandle in the child).  With the swap tier's VMM
backing the hook emulates legacy IPC (hook_ipc.c: the handle carries the
exporter's identity and keys, the importer checks who serves).  The child
checks the parent's bytes and writes its own; the parent checks those.
    python3 tests/gpu/ipc_check.py [MIB]   -> one JSON line"""
import json
import sys
import time

import torch
import torch.multiprocessing as mp


def child(q, back):
    t = q.get()
    torch.cuda.synchronize()
    n = t.numel()
    want = torch.arange(n, dtype=torch.int64, device="cuda") % 251
    same = bool(torch.equal(t.to(torch.int64), want))
    t[: n // 2].fill_(7)  # the parent sees this in its own memory
    torch.cuda.synchronize()
    back.put({"child_saw_parent_bytes": same})
    q.get()  # the parent has looked: the mapping may go


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    n = mib << 20
    ctx = mp.get_context("spawn")
    q, back = ctx.Queue(), ctx.Queue()
    t = (torch.arange(n, dtype=torch.int64, device="cuda") % 251).to(torch.uint8)
    torch.cuda.synchronize()
    p = ctx.Process(target=child, args=(q, back))
    p.start()
    t0 = time.time()
    q.put(t)
    r = back.get(timeout=120)
    torch.cuda.synchronize()
    r["parent_saw_child_bytes"] = bool((t[: n // 2] == 7).all()) and bool(
        torch.equal(t[n // 2:].to(torch.int64),
                    torch.arange(n // 2, n, dtype=torch.int64, device="cuda") % 251))
    r["seconds"] = round(time.time() - t0, 3)
    q.put(None)
    p.join(60)
    r.update(mib=mib, child_exit=p.exitcode,
             ok=r["child_saw_parent_bytes"] and r["parent_saw_child_bytes"] and p.exitcode == 0)
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
