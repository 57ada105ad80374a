"""One 'notebook' of the memory-pressure bench (pressure.py): holds BYTES of
GPU memory filled with a pattern seeded by SEED, and on each command from
stdin answers one JSON line:
    alloc            allocate and fill the data
    cell SCRATCH     allocate SCRATCH bytes on top of the data (a cell's
                     temporaries), check every byte of the data against the
                     pattern and its address, free the scratch
    quit
Each answer: {"ok", "error", "addr", "same_address", "bit_exact", "wall_s",
"waited_s", "waits", "wait_states"}.  The waits are the hook's own account
(gpushare_hook_wait_state: waiting for a grant, for room, for the memory to
come back); a notebook blocked inside a checkpointed driver is not one of
them (its cell's wall time shows it).  Out of memory and other CUDA errors
are answered, not raised: the notebook lives on, as a Jupyter kernel does.
With PyTorch on a GPU, or with the simulated GPU's gpusim.py when
PRESSURE_BACKEND=sim.
    pressure_worker.py BYTES SEED"""
import ctypes
import json
import os
import sys
import threading
import time

torch = None
if os.environ.get("PRESSURE_BACKEND") != "sim":  # else the simulated GPU's gpusim.py
    import torch

NBYTES = int(sys.argv[1])
SEED = int(sys.argv[2])
CHUNK = 256 << 20  # the check regenerates the pattern a chunk at a time


class Waits:
    """The hook's wait account, and the states it went through while a
    cell ran (looked at a few times a second, as the notebook's wait line
    does; no CUDA call)."""

    def __init__(self):
        try:
            self.fn = ctypes.CDLL(None).gpushare_hook_wait_state
            self.fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            self.fn.restype = ctypes.c_int
        except AttributeError:  # no hook
            self.fn = None

    def state(self):
        if self.fn is None:
            return {}
        buf = ctypes.create_string_buffer(16384)
        if not 0 <= self.fn(buf, len(buf)) < len(buf):
            return {}
        devs = json.loads(buf.value.decode("utf-8", "replace")).get("devices") or [{}]
        return devs[0]

    def during(self, work):
        """Runs work(); returns (its result, waited_s, waits, states seen)."""
        before = self.state()
        seen, done = set(), threading.Event()

        def watch():
            while not done.wait(0.2):
                s = self.state().get("state")
                if s and s != "none":
                    seen.add(s)
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        try:
            result = work()
        finally:
            done.set()
            t.join()
        after = self.state()
        waited = after.get("waited_s", 0) - before.get("waited_s", 0)
        return result, round(waited, 3), after.get("waits", 0) - before.get("waits", 0), \
            sorted(seen)


class TorchData:
    def _pattern(self, i, size):
        g = torch.Generator(device="cuda").manual_seed(SEED * 100003 + i)
        return torch.randint(0, 256, (size,), dtype=torch.uint8, device="cuda", generator=g)

    def alloc(self):
        self.x = torch.empty(NBYTES, dtype=torch.uint8, device="cuda")
        for i in range(0, NBYTES, CHUNK):
            self.x[i:i + CHUNK].copy_(self._pattern(i // CHUNK, min(CHUNK, NBYTES - i)))
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the fill's temporaries: the footprint is the data
        return self.x.data_ptr()

    def cell(self, scratch):
        s = torch.full((scratch,), 7, dtype=torch.uint8, device="cuda") if scratch else None
        ok = all(torch.equal(self.x[i:i + CHUNK], self._pattern(i // CHUNK,
                                                                min(CHUNK, NBYTES - i)))
                 for i in range(0, NBYTES, CHUNK))
        if s is not None:
            ok = ok and int(s[-1]) == 7
        del s
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return self.x.data_ptr(), ok


class SimData:
    def __init__(self):
        import random

        import gpusim
        self.gpusim = gpusim
        gpusim.init()
        rng = random.Random(SEED)
        self.data = rng.randbytes(NBYTES)
        self.ptr = None

    def _alloc(self, nbytes):
        """An allocation as PyTorch's caching allocator makes it: after an
        out-of-memory error it frees its cache and asks once more (the
        broker answers a notebook that holds as much as it lacks at once
        the first time, so that such a cache can go; the second request
        waits for room).  This notebook caches nothing."""
        try:
            return self.gpusim.alloc(nbytes)
        except Exception as e:
            if "OUT_OF_MEMORY" not in str(e):
                raise
            return self.gpusim.alloc(nbytes)

    def alloc(self):
        self.ptr = self._alloc(NBYTES)
        self.gpusim.write(self.ptr, self.data)
        return self.ptr

    def cell(self, scratch):
        s = self._alloc(scratch) if scratch else None
        try:
            if s is not None:
                self.gpusim.write(s, b"\7" * scratch)
            ok = self.gpusim.read(self.ptr, NBYTES) == self.data
            self.gpusim.launch(us=2000)
            self.gpusim.synchronize()
        finally:
            if s is not None:
                self.gpusim.free(s)
        return self.ptr, ok


def main():
    data = TorchData() if torch is not None else SimData()
    waits = Waits()
    addr = None
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        t0 = time.time()
        answer = {"ok": False, "error": None}
        try:
            if words[0] == "alloc":
                (got, waited, n, states) = waits.during(data.alloc)
                addr = got
                answer.update(ok=True, addr=hex(got))
            elif words[0] == "cell":
                if addr is None:
                    raise RuntimeError("no data: its allocation failed")
                ((got, ok), waited, n, states) = waits.during(
                    lambda: data.cell(int(words[1]) if len(words) > 1 else 0))
                answer.update(ok=ok, bit_exact=ok, addr=hex(got), same_address=got == addr,
                              error=None if ok else "data changed")
            else:
                raise RuntimeError("unknown command %r" % words[0])
            answer.update(waited_s=waited, waits=n, wait_states=states)
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError and gpusim.CudaError are ones
            answer["error"] = str(e).splitlines()[0][:300]
        answer["wall_s"] = round(time.time() - t0, 3)
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
