"""Can a checkpointed process still be restored after a restore failed for
want of GPU memory?  (Issue 34's H100 run: a restore that met another
process's memory failed with CUDA_ERROR_OUT_OF_MEMORY, and every later try
with CUDA_ERROR_OPERATING_SYSTEM.)  Driver API only, through ctypes, no
gpushare: the facts the broker's retries must be built on.

  1. a child (PyTorch) fills A GiB and waits;
  2. lock + checkpoint it (its memory leaves the GPU);
  3. a hog (PyTorch) takes all but 1 GiB of what is free;
  4. restore: expected CUDA_ERROR_OUT_OF_MEMORY; the state after it;
  5. the hog exits; wait until the memory is free again;
  6. restore again, unlock; the child checks its data.

    python3 tests/gpu/restore_oom_probe.py [A_GIB]   -> JSON lines"""
import ctypes
import json
import subprocess
import sys
import time

GIB = 1 << 30
CHILD = r"""
import sys, torch
n = int(sys.argv[1]) << 30
g = torch.Generator(device="cuda").manual_seed(7)
x = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=g)
want = int(x[::4096].sum())
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
ok = int(x[::4096].sum()) == want
print("ok" if ok else "bad", flush=True)
"""
HOG = r"""
import sys, torch
free, total = torch.cuda.mem_get_info()
n = free - (1 << 30)
x = torch.empty(n, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("held %d" % n, flush=True)
sys.stdin.readline()
"""
STATES = {0: "RUNNING", 1: "LOCKED", 2: "CHECKPOINTED", 3: "FAILED"}


def main():
    a_gib = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0

    def name(rc):
        s = ctypes.c_char_p()
        cu.cuGetErrorName(rc, ctypes.byref(s))
        return s.value.decode() if s.value else str(rc)

    args = ctypes.create_string_buffer(64)  # zeroed *Args structs (64 bytes each)

    def call(fn, pid, what):
        t0 = time.time()
        rc = getattr(cu, fn)(ctypes.c_int(pid), args)
        st = ctypes.c_int(-1)
        cu.cuCheckpointProcessGetState(ctypes.c_int(pid), ctypes.byref(st))
        row = {"step": what, "call": fn, "rc": name(rc), "state_after": STATES.get(st.value,
                                                                                   st.value),
               "seconds": round(time.time() - t0, 3)}
        print(json.dumps(row), flush=True)
        return rc

    def free_bytes():
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout
        return int(out.split()[0]) << 20

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(a_gib)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    call("cuCheckpointProcessLock", child.pid, "lock")
    call("cuCheckpointProcessCheckpoint", child.pid, "checkpoint")
    hog = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    print(json.dumps({"step": "hog", "line": hog.stdout.readline().strip(),
                      "free_after": free_bytes()}), flush=True)
    call("cuCheckpointProcessRestore", child.pid, "restore while the hog holds the memory")
    call("cuCheckpointProcessRestore", child.pid, "again, the hog still there")
    hog.stdin.write("\n")
    hog.stdin.flush()
    hog.wait(60)
    deadline = time.time() + 60
    while free_bytes() < (a_gib + 2) * GIB and time.time() < deadline:
        time.sleep(0.2)  # the driver frees an exited process's memory by itself
    print(json.dumps({"step": "hog gone", "free": free_bytes()}), flush=True)
    rc = call("cuCheckpointProcessRestore", child.pid, "restore with room")
    if rc != 0:
        time.sleep(2)
        rc = call("cuCheckpointProcessRestore", child.pid, "restore with room, 2 s later")
    urc = call("cuCheckpointProcessUnlock", child.pid, "unlock")
    result = None
    if urc == 0:
        child.stdin.write("\n")
        child.stdin.flush()
        result = child.stdout.readline().strip()
    child.kill()
    print(json.dumps({"summary": True, "a_gib": a_gib, "restored_after_oom": rc == 0,
                      "data": result}), flush=True)


if __name__ == "__main__":
    main()
