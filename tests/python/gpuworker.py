"""The program the scheduler's and the parking tests run with the hook
preloaded on the simulated GPU: a stand-in for a notebook's process.

    gpuworker.py loop US [NAME]   kernel + synchronize for ever (a training
                                  loop); prints "first" after the first one
    gpuworker.py steps US [NAME]  reads "run N" lines, runs N kernel +
                                  synchronize steps, prints "done N"
    gpuworker.py commands         reads one command a line, answers one line:
        alloc NAME BYTES   allocate device memory  -> "ok" | "err <CUDA error>"
        fill NAME SEED     write a pattern into it  -> "ok"
        check NAME SEED    read it back, compare    -> "ok" | "bad <first offset>"
        run N              N 1 ms kernels + sync    -> "ok"
        spin S             1 ms kernels for S s     -> "ok N" (kernels run)
        job NAME N G C SEED  N times: G 1 ms kernels + sync, the ends of
                           NAME checked against SEED's pattern, then C ms
                           of CPU (a sleep)          -> "ok" | "bad <offset>"
        free NAME          free it                  -> "ok"
        segment NAME BYTES device memory as PyTorch's expandable segments
                           hold it (cuMemCreate pages mapped into a
                           reserved range)          -> "ok" | "err ..."
        release NAME       unmap and release a segment -> "ok"
"""
import sys
import time


def pattern(seed, n):
    """n bytes that differ with seed and with the offset (a page moved to
    another address, or another session's page, would not match)."""
    block = bytes((i * 7 + seed * 13 + (i >> 8)) & 0xFF for i in range(65536))
    reps = n // len(block) + 1
    return (block * reps)[:n]


def loop(gpusim, us, name):
    first = True
    while True:
        gpusim.launch(us=us, name=name)
        gpusim.synchronize()
        if first:
            print("first", flush=True)
            first = False


def steps(gpusim, us, name):
    for line in sys.stdin:
        n = int(line.split()[1])
        for _ in range(n):
            gpusim.launch(us=us, name=name)
            gpusim.synchronize()
        print("done %d" % n, flush=True)


def commands(gpusim):
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
                ptr, n = bufs[args[0]][:2]
                gpusim.write(ptr, pattern(int(args[1]), n))
            elif cmd == "check":
                ptr, n = bufs[args[0]][:2]
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
            elif cmd == "job":
                ptr, n = bufs[args[0]][:2]
                want = pattern(int(args[4]), n)
                ends = [(0, 65536), (n - 65536, n)]
                bad = None
                for _ in range(int(args[1])):
                    for _ in range(int(args[2])):
                        gpusim.launch(us=1000)
                    gpusim.synchronize()
                    for a, z in ends:  # the data is there in every GPU phase
                        got = gpusim.read(ptr + a, z - a)
                        if got != want[a:z] and bad is None:
                            bad = a + next(i for i in range(z - a) if got[i] != want[a + i])
                    time.sleep(int(args[3]) / 1000.0)
                if bad is not None:
                    print("bad %d" % bad, flush=True)
                    continue
            elif cmd == "free":
                gpusim.free(bufs.pop(args[0])[0])
            elif cmd == "segment":
                seg = gpusim.Segment(int(args[1]))
                bufs[args[0]] = (seg.base, int(args[1]), seg)
            elif cmd == "release":
                bufs.pop(args[0])[2].free()
            else:
                print("err unknown command", flush=True)
                continue
        except gpusim.CudaError as e:
            print("err %s" % e.name, flush=True)
            continue
        print("ok", flush=True)


def main(argv):
    import gpusim
    gpusim.init()
    mode = argv[0]
    if mode == "commands":
        commands(gpusim)
    elif mode == "loop":
        loop(gpusim, int(argv[1]), argv[2] if len(argv) > 2 else "kernel")
    elif mode == "steps":
        steps(gpusim, int(argv[1]), argv[2] if len(argv) > 2 else "kernel")
    else:
        sys.exit("gpuworker.py: no mode %r" % mode)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
