"""The worker of the parking tests (parktest.py): a stand-in for a notebook
kernel on the simulated GPU, run with the hook preloaded.  It reads one
command per line and answers one line per command:
    alloc NAME BYTES   allocate device memory  -> "ok" | "err <CUDA error>"
    fill NAME SEED     write a pattern into it  -> "ok"
    check NAME SEED    read it back, compare    -> "ok" | "bad <first offset>"
    run N              N 1 ms kernels + sync    -> "ok"
    spin S             1 ms kernels for S s     -> "ok N" (kernels run)
    free NAME          free it                  -> "ok"
"""
import sys
import time


def pattern(seed, n):
    """n bytes that differ with seed and with the offset (a page moved to
    another address, or another session's page, would not match)."""
    block = bytes((i * 7 + seed * 13 + (i >> 8)) & 0xFF for i in range(65536))
    reps = n // len(block) + 1
    return (block * reps)[:n]



def _work():
    import gpusim
    gpusim.init()
    bufs = {}
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        cmd, args = words[0], words[1:]
        try:
            if cmd == "alloc":
                bufs[args[0]] = (gpusim.alloc(int(args[1])), int(args[1]))
            elif cmd == "fill":
                ptr, n = bufs[args[0]]
                gpusim.write(ptr, pattern(int(args[1]), n))
            elif cmd == "check":
                ptr, n = bufs[args[0]]
                got, want = gpusim.read(ptr, n), pattern(int(args[1]), n)
                if got != want:
                    first = next(i for i in range(n) if got[i] != want[i])
                    print("bad %d" % first, flush=True)
                    continue
            elif cmd == "run":
                for _ in range(int(args[0])):
                    gpusim.launch(us=1000)
                gpusim.synchronize()
            elif cmd == "spin":
                end, n = time.monotonic() + float(args[0]), 0
                while time.monotonic() < end:
                    gpusim.launch(us=1000)
                    gpusim.synchronize()
                    n += 1
                print("ok %d" % n, flush=True)
                continue
            elif cmd == "free":
                gpusim.free(bufs.pop(args[0])[0])
            else:
                print("err unknown command", flush=True)
                continue
        except gpusim.CudaError as e:
            print("err %s" % e.name, flush=True)
            continue
        print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_work())
