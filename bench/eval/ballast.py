"""bench/eval/ballast.py - hold most of the GPU, natively (no hook), so that
the evaluation's "big" working sets exceed the memory that is left without
needing 140 GB of them (parking 70 GB takes about 30 s on the H200).

    python3 ballast.py LEAVE_GIB

Measures the free memory first, allocates in 1 GiB chunks until LEAVE_GIB
are left free (never more than is free), prints one JSON line
{"held_bytes", "free_before", "free_after", "total"} and holds the memory
until stdin is closed.  EVAL_BACKEND=sim uses the simulated driver."""
import json
import os
import sys

GIB = 1 << 30


def main():
    leave = int(float(sys.argv[1]) * GIB)
    if os.environ.get("EVAL_BACKEND", "torch") == "sim":
        import gpusim
        gpusim.init()
        mem_info, alloc = gpusim.mem_info, gpusim.alloc
    else:
        import torch
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the context exists before free memory is measured
        held_tensors = []

        def mem_info():
            return torch.cuda.mem_get_info()

        def alloc(n):
            held_tensors.append(torch.empty(n, dtype=torch.uint8, device="cuda"))

    free, total = mem_info()
    held = 0
    want = free - leave
    while want - held > 0:
        n = min(GIB, want - held)
        n -= n % (2 << 20)  # whole 2 MiB pages: what the allocators round to
        if n <= 0:
            break
        alloc(n)
        held += n
    free_after = mem_info()[0]
    print(json.dumps({"held_bytes": held, "free_before": free, "free_after": free_after,
                      "total": total}), flush=True)
    sys.stdin.read()  # hold until the orchestrator closes our stdin


if __name__ == "__main__":
    main()
