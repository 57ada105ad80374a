#!/usr/bin/env python3
"""Tests of gpusim.py (the Python helper and its command line) against the
simulated driver, printing TAP for automake.  Each check runs python3 in a
subprocess with LD_LIBRARY_PATH at the built simulator and a simulated
machine of its own (GPUSHARE_SIM_NAME)."""
import json
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("GPUSIM_SRCDIR", HERE)
LIBDIR = os.environ.get("GPUSIM_LIBDIR", os.path.join(HERE, ".libs"))
NAME = "/gpusim-pytest-%d" % os.getpid()
LOG = os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpusim-pytest-%d.log" % os.getpid())


def sanitizer_preload():
    """A sanitizer build of the simulator needs its runtimes loaded first in
    python (which is not instrumented): their paths, from ldd."""
    try:
        out = subprocess.run(["ldd", os.path.join(LIBDIR, "libcuda.so.1")], capture_output=True,
                             text=True, timeout=30).stdout
    except OSError:
        return ""
    libs = [line.split("=>")[1].split()[0] for line in out.splitlines()
            if "=>" in line and ("libasan" in line or "libubsan" in line)]
    return ":".join(p for p in libs if os.path.exists(p))


PRELOAD = sanitizer_preload()


def env(**extra):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    if PRELOAD:
        e["LD_PRELOAD"] = PRELOAD
        e["ASAN_OPTIONS"] = "detect_leaks=0"  # python itself is not leak-clean
    e.update({
        "LD_LIBRARY_PATH": LIBDIR,
        "PYTHONPATH": SRCDIR,
        "GPUSHARE_SIM_NAME": NAME,
        "GPUSHARE_SIM_MEMORY": "64M",
        "GPUSHARE_SIM_LOG": LOG,
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    e.update(extra)
    return e


def run(args, extra_env=None, **kw):
    return subprocess.run([sys.executable] + args, env=env(**(extra_env or {})),
                          capture_output=True, text=True, timeout=60, **kw)


def cli(*args, **kw):
    return run([os.path.join(SRCDIR, "gpusim.py")] + list(args), **kw)


def test_api():
    code = textwrap.dedent("""
        import gpusim, threading
        assert gpusim.is_simulated()
        gpusim.init()
        free0, total = gpusim.mem_info()
        assert total == 64 << 20 and free0 == total, (free0, total)
        p = gpusim.alloc(1 << 20)
        assert gpusim.mem_info()[0] == total - (1 << 20)
        gpusim.write(p, b"hello\\0world")
        assert gpusim.read(p, 11) == b"hello\\0world"
        gpusim.launch(us=5000, name="py_kernel")
        s = gpusim.stream()
        gpusim.launch(us=1000, stream=s)
        s.synchronize()
        s.destroy()
        gpusim.synchronize()
        assert gpusim.process_busy_ns() >= 6000000, gpusim.process_busy_ns()
        assert gpusim.busy_ns() >= 6000000
        # another thread: the context is made current there too
        out = []
        t = threading.Thread(target=lambda: out.append(gpusim.alloc(4096)))
        t.start(); t.join()
        gpusim.free(out[0])
        try:
            gpusim.alloc(1 << 30)
        except gpusim.CudaError as e:
            assert e.name == "CUDA_ERROR_OUT_OF_MEMORY", e.name
            assert "cuMemAlloc_v2" in str(e)
        else:
            raise AssertionError("no error")
        gpusim.free(p)
        assert gpusim.mem_info()[0] == total
        print("ok")
    """)
    r = run(["-c", code])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_cli_work():
    if os.path.exists(LOG):
        os.unlink(LOG)
    r = cli("work", "--kernels", "3", "--us", "2000", "--name", "cli_kernel")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kernels"] == 3 and out["process_busy_ns"] >= 6000000, out
    with open(LOG) as f:
        lines = [json.loads(line) for line in f]
    kernels = [x for x in lines if x["op"] == "kernel" and x["name"] == "cli_kernel"]
    assert len(kernels) == 3, lines
    assert all(k["end_ns"] - k["start_ns"] >= 2000000 for k in kernels)


def test_cli_alloc():
    r = cli("alloc", "1M")
    assert r.returncode == 0 and json.loads(r.stdout)["bytes"] == 1 << 20, r.stderr
    r = cli("alloc", "1G")
    assert r.returncode == 1 and "CUDA_ERROR_OUT_OF_MEMORY" in r.stderr, (r.returncode, r.stderr)


def test_cli_alloc_hold():
    holder = subprocess.Popen([sys.executable, os.path.join(SRCDIR, "gpusim.py"), "alloc", "48M",
                               "--hold"], env=env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(holder.stdout.readline())
        assert first["bytes"] == 48 << 20
        info = json.loads(cli("info").stdout)
        assert info["simulated"] and info["free"] == 16 << 20, info
        r = cli("alloc", "32M")
        assert r.returncode == 1 and "OUT_OF_MEMORY" in r.stderr
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
    info = json.loads(cli("info").stdout)
    assert info["free"] == 64 << 20, info


def test_cli_inject():
    assert cli("info").returncode == 0  # the simulated machine exists
    r = cli("inject", "cuMemAlloc", "1", "--error", "CUDA_ERROR_NOT_PERMITTED")
    assert r.returncode == 0, r.stderr
    r = cli("alloc", "1M")
    assert r.returncode == 1 and "CUDA_ERROR_NOT_PERMITTED" in r.stderr, r.stderr
    assert cli("alloc", "1M").returncode == 0  # only the next one
    r = cli("inject", "cuNoSuchCall")
    assert r.returncode == 1 and "cannot inject" in r.stderr, r.stderr
    r = cli("inject", "cuMemAlloc", "--error", "CUDA_ERROR_NO_SUCH_THING")
    assert r.returncode == 1 and "no CUDA error" in r.stderr, r.stderr


def test_host_stats():
    """host_stats() and `gpusim.py host` read the simulated host's memory
    (GPUSHARE_SIM_HOST_MEMORY) that pinned memory is charged to."""
    machine = {"GPUSHARE_SIM_NAME": NAME + "-host", "GPUSHARE_SIM_HOST_MEMORY": "8M"}
    code = textwrap.dedent("""
        import ctypes, gpusim, subprocess, sys, json
        gpusim.init()
        lib = gpusim._load()
        p = ctypes.c_void_p()
        assert lib.cuMemAllocHost_v2(ctypes.byref(p), ctypes.c_size_t(6 << 20)) == 0
        assert lib.cuMemAllocHost_v2(ctypes.byref(ctypes.c_void_p()), ctypes.c_size_t(4 << 20)) == 2
        st = gpusim.host_stats()
        assert st["limit"] == 8 << 20 and st["used"] == 6 << 20 and st["kills"] == 0, st
        out = subprocess.run([sys.executable, sys.argv[1], "host"], capture_output=True,
                             text=True, timeout=30)
        assert json.loads(out.stdout)["pinned"] == 6 << 20, out.stdout + out.stderr
        assert lib.cuMemFreeHost(p) == 0
        assert gpusim.host_stats()["used"] == 0
        print("ok")
    """)
    try:
        r = run(["-c", code, os.path.join(SRCDIR, "gpusim.py")], extra_env=machine)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    finally:
        if os.path.exists("/dev/shm" + machine["GPUSHARE_SIM_NAME"]):
            os.unlink("/dev/shm" + machine["GPUSHARE_SIM_NAME"])


TESTS = [test_api, test_cli_work, test_cli_alloc, test_cli_alloc_hold, test_cli_inject,
         test_host_stats]


def main():
    print("1..%d" % len(TESTS))
    failed = 0
    try:
        for i, t in enumerate(TESTS, 1):
            try:
                t()
                print("ok %d - %s" % (i, t.__name__))
            except Exception as e:  # report and go on
                failed += 1
                print("not ok %d - %s" % (i, t.__name__))
                for line in str(e).splitlines() or [repr(e)]:
                    print("# " + line)
            sys.stdout.flush()
    finally:
        for path in ("/dev/shm" + NAME, LOG):
            if os.path.exists(path):
                os.unlink(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
