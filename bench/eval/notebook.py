"""bench/eval/notebook.py - one notebook of the evaluation (bench/eval/eval.py
drives it).  It runs inside tests/gpu/mini_kernel.py, the stand-in for
ipykernel, so each `with cell():` publishes a real IOPub busy/idle that the
launcher's watcher reports to the broker, exactly as a notebook cell:

    gpushare-launch --broker EP -- python3 tests/gpu/mini_kernel.py -f CONN notebook.py
    python3 tests/gpu/mini_kernel.py notebook.py                 (native: no hook, no cells)

It reads one JSON command per line on stdin and answers with JSON lines on
stdout (other output goes to stderr).  Commands ("op"): calibrate, train,
bench, bench_ab, job, alloc, free, hold, probe, cells, random_cells, mem,
quit.

Two backends with the same commands: the real GPU through PyTorch (the
default) and, with EVAL_BACKEND=sim, the test suite's simulated driver
through tests/simcuda/gpusim.py, where a "unit" of GPU work is one simulated
kernel of EVAL_SIM_UNIT_US.  Times are time.monotonic() (CLOCK_MONOTONIC,
one clock for every process of the machine), so the orchestrator can
compare one notebook's cell end with another's first kernel.

GPU work is a fixed amount of work (a number of units, calibrated once on an
idle GPU), never a fixed time, so contention shows as longer phases.  CPU
work is real host computation in pure Python (one core, holding the GIL as
data preparation in a notebook does)."""
import json
import math
import os
import random
import sys
import time

try:
    from mini_kernel import cell
except ImportError:  # run directly (the sim null-launch loop): no cells
    import contextlib
    cell = contextlib.nullcontext

BACKEND = os.environ.get("EVAL_BACKEND", "torch")
UNIT_N = int(os.environ.get("EVAL_UNIT_N", "4096"))  # matmul side of one unit of GPU work
CPU_UNIT = 20000  # iterations of the Python loop in one unit of CPU work
now = time.monotonic


def reply(**kw):
    print(json.dumps(kw), flush=True)


def cpu_work(units):
    """Real host computation: a linear congruential generator in pure
    Python (one core, as a notebook's data preparation)."""
    x = 1
    for _ in range(units):
        for _ in range(CPU_UNIT):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


class TorchGPU:
    """The real GPU: a unit of GPU work is one bf16 matmul of UNIT_N^2."""

    def __init__(self):
        import torch
        self.torch = torch
        torch.manual_seed(os.getpid())
        n = UNIT_N
        self.a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16) / math.sqrt(n)
        self.b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16) / math.sqrt(n)
        self.c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        self.one = torch.zeros(1, device="cuda")
        self.ws = None
        self.models = {}
        self.gpu_work(8)  # cuBLAS handle and workspace now, not in a measured cell
        self.sync()

    def gpu_work(self, units):
        for _ in range(units):
            self.torch.mm(self.a, self.b, out=self.c)

    def tiny(self):
        self.one.add_(1)

    def sync(self):
        self.torch.cuda.synchronize()

    def free_bytes(self):
        return self.torch.cuda.mem_get_info()[0]

    def alloc(self, nbytes):
        self.ws = self.torch.empty(nbytes, dtype=self.torch.uint8, device="cuda")
        self.ws.fill_(1)  # touched: the pages exist

    def touch(self):
        if self.ws is not None:
            self.ws.add_(1)  # reads and writes the whole working set

    def free(self):
        self.ws = None
        self.torch.cuda.empty_cache()  # back to the driver, as a notebook's `del` + empty_cache

    def reserved(self):
        return self.torch.cuda.memory_reserved()  # the allocator's own count: no CUDA call

    # ---- models (synthetic data; torchvision builds them without weights) ----
    def model(self, name):
        if name in self.models:
            return self.models[name]
        torch = self.torch
        if name == "mlp":
            layers = []
            for _ in range(4):
                layers += [torch.nn.Linear(2048, 2048), torch.nn.ReLU()]
            net = torch.nn.Sequential(*layers, torch.nn.Linear(2048, 1000)).cuda()
            x = torch.randn(512, 2048, device="cuda")
        else:
            import torchvision
            net = getattr(torchvision.models, name)().cuda().to(memory_format=torch.channels_last)
            x = torch.randn(64, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (x.shape[0],), device="cuda")
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

        def train():
            net.train()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        def infer():
            net.eval()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                return net(x)

        self.models[name] = {"train": train, "infer": infer}
        return self.models[name]

    def timed_steps(self, fn, warmup, steps):
        """Milliseconds per step on the GPU's clock (CUDA events), as
        bench/torch_step.py measures, and on the host's."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        t0 = now()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / steps, (now() - t0) * 1000 / steps

    def value(self, out):
        return out.item() if out.dim() == 0 else out.float().mean().item()  # a sync, as logging does


class SimGPU:
    """The simulated driver: a unit of GPU work is one simulated kernel of
    EVAL_SIM_UNIT_US; "models" are fixed sequences of kernels."""

    def __init__(self):
        import gpusim
        self.g = gpusim
        gpusim.init()
        self.unit_us = int(os.environ.get("EVAL_SIM_UNIT_US", "1000"))
        self.ws = None
        self.ws_bytes = 0

    def gpu_work(self, units):
        for _ in range(units):
            self.g.launch(us=self.unit_us)

    def tiny(self):
        self.g.launch(us=1)

    def sync(self):
        self.g.synchronize()

    def free_bytes(self):
        return self.g.mem_info()[0]

    def alloc(self, nbytes):
        self.ws = self.g.alloc(nbytes)
        self.ws_bytes = nbytes
        self.g.write(self.ws, b"\1" * min(nbytes, 1 << 20))

    def touch(self):
        if self.ws is not None:
            self.g.launch(us=10)

    def free(self):
        if self.ws is not None:
            self.g.free(self.ws)
        self.ws, self.ws_bytes = None, 0

    def reserved(self):
        return self.ws_bytes

    def model(self, name):
        kernels, us = {"mlp": (10, 30), "resnet18": (20, 60), "resnet50": (30, 150)}[name]
        g = self.g

        def run(k):
            for _ in range(k):
                g.launch(us=us)
            return 0.0

        return {"train": lambda: run(kernels), "infer": lambda: run(max(1, kernels // 3))}

    def timed_steps(self, fn, warmup, steps):
        for _ in range(warmup):
            fn()
        self.sync()
        t0 = now()
        for _ in range(steps):
            fn()
        self.sync()
        ms = (now() - t0) * 1000 / steps
        return ms, ms

    def value(self, out):
        self.sync()
        return out


# ---- commands -----------------------------------------------------------------

def op_calibrate(gpu, cmd):
    """Solo cost of one unit of GPU and of CPU work (the best of a few runs,
    on an idle machine), to turn the evaluation's times into amounts."""
    n = cmd.get("units", 200)
    best = float("inf")
    for _ in range(3):
        gpu.sync()
        t0 = now()
        gpu.gpu_work(n)
        gpu.sync()
        best = min(best, (now() - t0) / n)
    cpu_best = float("inf")
    for _ in range(3):
        t0 = now()
        cpu_work(10)
        cpu_best = min(cpu_best, (now() - t0) / 10)
    reply(op="calibrate", gpu_unit_ms=best * 1000, cpu_unit_ms=cpu_best * 1000, unit_n=UNIT_N)


def op_bench(gpu, cmd):
    """Cost alone: ms per training or inference step of one model, in one cell."""
    m = gpu.model(cmd["model"])
    with cell():
        ev_ms, wall_ms = gpu.timed_steps(m[cmd["mode"]], cmd.get("warmup", 5), cmd["steps"])
    reply(op="bench", model=cmd["model"], mode=cmd["mode"], steps=cmd["steps"], ms=ev_ms,
          wall_ms=wall_ms)


def op_train(gpu, cmd):
    """Notebook A: train without pause for `seconds` in one cell; a loss is
    read every 10 steps (a sync, as logging does)."""
    step = gpu.model(cmd.get("model", "resnet50"))["train"]
    steps = 0
    marks = []  # [time, steps done]: A's rate in any window (the trainer's loss)
    with cell():
        t0 = now()
        marks.append([t0, 0])
        while True:
            for _ in range(10):
                out = step()
            gpu.value(out)
            steps += 10
            marks.append([now(), steps])
            if now() - t0 >= cmd["seconds"]:
                break
        t1 = now()
    reply(op="train", steps=steps, start=t0, end=t1, steps_per_s=steps / (t1 - t0),
          marks=marks if cmd.get("marks") else None)


def op_bench_ab(gpu, cmd):
    """Cost alone, in one process: batches of steps of one model alternate
    between the hook's gate in force and bypassed (gpushare_hook_passthrough),
    in the order off, on, on, off, then on, off, off, on, ..., so that a
    drift of the machine's speed cancels; each batch is timed as `bench`
    times its steps.  Needs the hook (LD_PRELOAD)."""
    import ctypes
    try:
        passthrough = ctypes.CDLL(None).gpushare_hook_passthrough
    except AttributeError:
        reply(op="bench_ab", error="no gpushare hook in this process")
        return
    passthrough.argtypes, passthrough.restype = [ctypes.c_int], ctypes.c_int
    launches = ctypes.CDLL(None).gpushare_hook_launch_count
    launches.restype = ctypes.c_longlong
    fn = gpu.model(cmd["model"])[cmd["mode"]]
    steps = cmd["steps"]
    rows = []
    with cell():
        gpu.timed_steps(fn, cmd.get("warmup", 5), 1)
        try:
            for r in range(cmd["rounds"]):
                order = (0, 1, 1, 0) if r % 2 == 0 else (1, 0, 0, 1)
                got = {0: [], 1: []}
                n0 = launches()
                for gate in order:
                    passthrough(0 if gate else 1)
                    got[gate].append(gpu.timed_steps(fn, 1, steps))
                # (the hook counts only launches through the gate: 2 batches
                # of steps + 1 step of warm-up each)
                rows.append(dict(round=r, off_ms=sum(x[0] for x in got[0]) / 2,
                                 on_ms=sum(x[0] for x in got[1]) / 2,
                                 off_wall_ms=sum(x[1] for x in got[0]) / 2,
                                 on_wall_ms=sum(x[1] for x in got[1]) / 2,
                                 launches_per_step=(launches() - n0) / (2 * (steps + 1))))
        finally:
            passthrough(0)
    reply(op="bench_ab", model=cmd["model"], mode=cmd["mode"], steps=steps, rounds=rows)


def op_job(gpu, cmd):
    """A pair job (the thesis' Table 12.2): `iters` times a GPU phase of
    `gpu_units`, then a CPU phase of `cpu_units`, all in one cell; the
    working set (if allocated) is read and written in every GPU phase."""
    iters = []
    with cell():
        t0 = now()
        for _ in range(cmd["iters"]):
            ti = now()
            gpu.touch()
            gpu.gpu_work(cmd["gpu_units"])
            gpu.sync()
            tg, cg = now(), time.thread_time()
            cpu_work(cmd["cpu_units"])
            # the CPU phase's own CPU time beside its wall time: a phase
            # slower than alone with as much CPU time ran on a slower core
            # (a busy sibling thread), with less it was kept off the core
            iters.append([round(tg - ti, 4), round(now() - tg, 4),
                          round(time.thread_time() - cg, 4)])
        t1 = now()
    reply(op="job", start=t0, end=t1, seconds=t1 - t0, iters=iters)


def op_alloc(gpu, cmd):
    """Allocate and touch a working set, in a cell of its own.  With check,
    the GPU's free memory is looked at first and a working set that does not
    fit is refused (the native runs: never push a real GPU into OOM)."""
    nbytes = int(cmd["gib"] * (1 << 30))
    with cell():
        t0 = now()
        if cmd.get("check"):
            free = gpu.free_bytes()
            if free < nbytes + min(256 << 20, nbytes // 8):  # room for the driver's rounding
                reply(op="alloc", ok=False, error="does not fit: %.2f GiB free" % (free / 2**30),
                      free_bytes=free, seconds=now() - t0)
                return
        try:
            gpu.alloc(nbytes)
            gpu.sync()
        except Exception as e:  # torch.cuda.OutOfMemoryError, gpusim.CudaError
            gpu.ws = None
            reply(op="alloc", ok=False, error="%s: %s" % (type(e).__name__, str(e)[:200]),
                  seconds=now() - t0)
            return
        t1 = now()
    reply(op="alloc", ok=True, bytes=nbytes, start=t0, end=t1, seconds=t1 - t0)


def op_free(gpu, cmd):
    with cell():
        gpu.free()
        gpu.sync()
    reply(op="free")


def op_hold(gpu, cmd):
    """Idle reclaim, the holder: a cell that gets the GPU (says so), works
    `units`, and ends; `end` is its last instruction."""
    with cell():
        gpu.tiny()
        gpu.sync()
        reply(op="hold", phase="started", t=now())
        gpu.gpu_work(cmd["units"])
        gpu.sync()
        t_end = now()
    reply(op="hold", phase="end", end=t_end)


def op_probe(gpu, cmd):
    """Idle reclaim, the waiter: a cell whose first kernel waits for the GPU;
    `ran` is when it had run (the sync returned)."""
    t0 = now()
    with cell():
        gpu.tiny()
        gpu.sync()
        t1 = now()
    reply(op="probe", start=t0, ran=t1)


def op_cells(gpu, cmd):
    """Notebook B: a short cell (`works` units, in turn) every `every_s`
    seconds from `start_delay_s` on, `count` cells; one waits for the
    previous to finish, as a user does.  Latency: cell start to results."""
    out = []
    t_base = now() + cmd.get("start_delay_s", 0)
    starts = [(t_base + i * cmd["every_s"], None) for i in range(cmd.get("count", 0))]
    # windows ([from, to] on time.monotonic): a cell every every_s within
    # each, none between (the trainer's loss: A with and without B, in turn);
    # a cell that would start after its window is left out.
    for w0, w1 in cmd.get("windows", []):
        starts += [(w0 + k * cmd["every_s"], w1)
                   for k in range(int(math.ceil((w1 - w0) / cmd["every_s"])))]
    for i, (start, until) in enumerate(starts):
        if until is not None and now() >= until:
            continue
        wait = start - now()
        if wait > 0:
            time.sleep(wait)  # the user's pause between cells, not a synchronisation
        units = cmd["works"][i % len(cmd["works"])]
        t0 = now()
        with cell():
            gpu.gpu_work(units)
            gpu.sync()
            t1 = now()
        out.append([units, t0, (t1 - t0) * 1000])
    reply(op="cells", cells=out)


def op_random_cells(gpu, cmd):
    """Scale: a mostly idle notebook; think times are exponential with mean
    `mean_gap_s`, cells do a log-uniform amount of work in [`min_units`,
    `max_units`], until `seconds` have passed."""
    rng = random.Random(cmd["seed"])
    t_end = now() + cmd["seconds"]
    out = []
    while True:
        think = rng.expovariate(1.0 / cmd["mean_gap_s"])
        if now() + think >= t_end:
            break
        time.sleep(think)  # the user's pause, part of the workload
        units = max(1, int(round(math.exp(rng.uniform(math.log(cmd["min_units"]),
                                                      math.log(cmd["max_units"]))))))
        t0 = now()
        with cell():
            gpu.gpu_work(units)
            gpu.sync()
            t1 = now()
        out.append([units, t0, (t1 - t0) * 1000])
    reply(op="random_cells", cells=out)


def op_mem(gpu, cmd):
    reply(op="mem", reserved_bytes=gpu.reserved(), pid=os.getpid())


OPS = {"calibrate": op_calibrate, "bench": op_bench, "train": op_train, "job": op_job,
       "alloc": op_alloc, "free": op_free, "hold": op_hold, "probe": op_probe, "cells": op_cells,
       "random_cells": op_random_cells, "mem": op_mem, "bench_ab": op_bench_ab}


def null_launch_sim(batches, batch):
    """The simulated counterpart of bench/null_launch.cu (which needs nvcc):
    host cost of launching an empty kernel, ns per call."""
    import gpusim
    gpusim.init()
    per = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            gpusim.launch(us=0)
        per.append((time.perf_counter_ns() - t0) / batch)
        gpusim.synchronize()
    per.sort()
    med = per[len(per) // 2]
    print(json.dumps({"batches": batches, "batch": batch, "hooked": "LD_PRELOAD" in os.environ,
                      "elf_bound_ns": med, "real_driver_ns": -1.0, "runtime_ns": med}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--null-launch":
        return null_launch_sim(int(sys.argv[2]), int(sys.argv[3]))
    gpu = SimGPU() if BACKEND == "sim" else TorchGPU()
    reply(op="ready", pid=os.getpid(), backend=BACKEND)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            OPS[cmd["op"]](gpu, cmd)
        except Exception as e:  # answer, so the orchestrator never waits for nothing
            reply(op=cmd["op"], error="%s: %s" % (type(e).__name__, str(e)[:300]))


if __name__ == "__main__":
    main()
