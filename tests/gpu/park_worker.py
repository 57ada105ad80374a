"""One 'notebook' of the H200 parking run: holds GIB of GPU memory filled
with a seeded pattern and, on each `cell` command from stdin, checks every
byte against the pattern, does some GPU work and reports the tensor's
address (parking must bring it back bit-exact at the same address).
    park_worker.py GIB SEED   (commands: alloc, cell, quit)"""
import sys
import time

try:
    import torch
except ImportError:  # a dry run on the simulated GPU (tests/simcuda/gpusim.py)
    torch = None

GIB = float(sys.argv[1])
SEED = int(sys.argv[2])
CHUNK = 1 << 30


def pattern(i, size):
    g = torch.Generator(device="cuda").manual_seed(SEED * 100003 + i)
    return torch.randint(0, 256, (size,), dtype=torch.uint8, device="cuda", generator=g)


def main_simulated():
    import random

    import gpusim
    gpusim.init()
    n = int(GIB * (1 << 30))
    rng = random.Random(SEED)
    data = b"".join(rng.randbytes(min(1 << 20, n - i)) for i in range(0, n, 1 << 20))
    ptr = None
    for line in sys.stdin:
        cmd = line.strip()
        t0 = time.time()
        if cmd == "alloc":
            ptr = gpusim.alloc(n)
            gpusim.write(ptr, data)
            print("allocated %#x %.2f" % (ptr, time.time() - t0), flush=True)
        elif cmd == "cell":
            ok = gpusim.read(ptr, n) == data
            gpusim.launch(us=20000)
            gpusim.synchronize()
            print("cell %s %#x %.2f" % ("ok" if ok else "CORRUPT", ptr, time.time() - t0),
                  flush=True)
        elif cmd == "quit":
            break


def main():
    if torch is None:
        return main_simulated()
    n = int(GIB * (1 << 30))
    x = None
    for line in sys.stdin:
        cmd = line.strip()
        t0 = time.time()
        if cmd == "alloc":
            x = torch.empty(n, dtype=torch.uint8, device="cuda")
            for i in range(0, n, CHUNK):
                x[i:i + CHUNK].copy_(pattern(i // CHUNK, min(CHUNK, n - i)))
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # the fill's temporaries: keep the footprint the tensor
            print("allocated %#x %.2f" % (x.data_ptr(), time.time() - t0), flush=True)
        elif cmd == "cell":
            ok = all(torch.equal(x[i:i + CHUNK], pattern(i // CHUNK, min(CHUNK, n - i)))
                     for i in range(0, n, CHUNK))
            a = torch.randn(8192, 8192, device="cuda")
            for _ in range(20):
                a = a @ a
                a = a / a.norm()
            del a
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            print("cell %s %#x %.2f" % ("ok" if ok else "CORRUPT", x.data_ptr(), time.time() - t0),
                  flush=True)
        elif cmd == "quit":
            break


if __name__ == "__main__":
    main()
