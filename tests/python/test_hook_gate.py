"""The hook's gate on the simulated GPU, driven by a fake broker: work goes
to the GPU only with a grant, many threads ask once and all proceed
together, captured work needs no grant, and two GPUs are granted apart.

"Only with a grant" is checked by the order of events on one clock
(CLOCK_MONOTONIC: the probe's lines, the fake broker's records, the
simulated driver's log): a call that waits for the grant returns, and its
work starts, after the grant was sent - however slow the machine is."""

import contextlib
import subprocess
import sys

import pytest

import gstest
from gstest import kernels


pytestmark = pytest.mark.fake_broker()


@contextlib.contextmanager
def hooked_python(sim, endpoint, prog):
    """A Python program run under the hook on the simulated GPU, killed if
    it is still running when the block ends."""
    env = gstest.hook_env(sim, endpoint, GPUSHARE_IDLE_RELEASE_MS=0)
    proc = subprocess.Popen([sys.executable, "-c", prog], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_registers_with_hello_and_join(fb, probe):
    p = probe(["init", "wait", "end"], GPUSHARE_SESSION="s-test")
    hello = fb.wait_for("hello")["msg"]
    assert hello["role"] == "hook" and hello["session"] == "s-test"
    assert hello["pid"] == p.proc.pid
    join = fb.wait_for("join")["msg"]
    assert join["session"] == "s-test" and join["pid"] == p.proc.pid
    assert len(join["devices"]) == 1 and join["devices"][0].startswith("GPU-")
    p.go()
    assert p.wait() == 0
    assert not fb.messages("acquire"), "no work, no acquire"


def test_launch_waits_for_grant(fb, probe, sim):
    p = probe(["init", "launch", "L", "1000", "kfirst", "sync", "end"])
    acq = fb.wait_for("acquire")
    join = fb.messages("join")[0]["msg"]
    assert acq["msg"]["device"] == join["devices"][0]
    p.expect("launching kfirst")
    assert not p.printed("launched") and not kernels(sim), "the launch did not wait"
    g = fb.grant(acq)
    _, t = p.expect("launched kfirst CUDA_SUCCESS")
    assert t >= g["t"], "the launch returned before the grant was sent"
    p.expect("sync CUDA_SUCCESS")
    assert p.wait() == 0
    (k,) = kernels(sim, "kfirst")
    assert k["start_ns"] >= g["t"], "the kernel started before the grant was sent"


@pytest.mark.fake_broker(heartbeat_ms=50)
def test_blocked_launch_stays_blocked(fb, probe, sim):
    # Nothing in the hook gives up on a grant while the broker lives: the
    # hook's own heartbeats (every 50 ms) come and go, its I/O thread runs
    # round after round, and the launch is still waiting.
    p = probe(["init", "launch", "L", "1000", "kfirst", "end"])
    acq = fb.wait_for("acquire")
    p.expect("launching kfirst")
    for _ in range(5):
        fb.wait_for("heartbeat", after=fb.count())
    assert not p.printed("launched") and not kernels(sim), "the launch did not wait"
    g = fb.grant(acq)
    _, t = p.expect("launched kfirst CUDA_SUCCESS")
    assert t >= g["t"]
    p.expect("end")


def test_memcpy_is_gated_too(fb, probe, sim):
    p = probe(["init", "stream", "memcpy", "0", "end"])
    acq = fb.wait_for("acquire")
    assert not p.printed("memcpy"), "the copy did not wait"
    g = fb.grant(acq)
    _, t = p.expect("memcpy CUDA_SUCCESS")
    assert t >= g["t"], "the copy returned before the grant was sent"
    assert p.wait() == 0
    assert all(r["start_ns"] >= g["t"] for r in gstest.sim_log(sim) if r["op"] == "memcpy")


def test_many_threads_one_acquire_all_proceed_after_grant(fb, probe, sim):
    p = probe(["init", "threads", "8", "2000", "sync", "end"])
    acq = fb.wait_for("acquire")
    for i in range(8):
        p.wait_line("thread %d launching" % i)  # all started ...
    assert p.count("thread") == 8, p.lines  # ... none got through yet
    assert not kernels(sim)
    g = fb.grant(acq)
    p.expect("threads done")
    assert p.wait() == 0
    launched = [t for i in range(8) for t in p.times_of("thread %d launched" % i)]
    assert len(launched) == 8 and min(launched) >= g["t"], "a thread got through before the grant"
    ks = kernels(sim)
    assert sorted(k["name"] for k in ks) == sorted("t%d" % i for i in range(8))
    assert all(k["start_ns"] >= g["t"] for k in ks)
    assert len(fb.messages("acquire")) == 1, "one acquire for all waiting threads"


def test_granted_launches_need_no_broker_round_trip(fb, probe, sim):
    fb.auto_grant = True
    p = probe(["init", "launch", "L", "10", "launch", "L", "10", "launch", "L", "10", "sync",
               "count", "cuLaunchKernel", "end"])
    fields, _ = p.expect("count cuLaunchKernel")
    assert fields[-1] == "3"
    assert p.wait() == 0
    assert len(fb.messages("acquire")) == 1


def test_captured_work_needs_no_grant(fb, probe, sim):
    p = probe(["init", "stream", "capture_begin", "0", "launch", "0", "1000", "kcap",
               "launch", "0", "1000", "kcap2", "capture_end", "0", "wait",
               "graph_launch", "0", "ssync", "0", "end"])
    p.expect("launched kcap CUDA_SUCCESS")
    p.expect("launched kcap2 CUDA_SUCCESS")
    p.expect("capture_end CUDA_SUCCESS")
    p.expect("wait")
    assert not fb.messages("acquire"), "capturing asked for the GPU"
    assert not kernels(sim)
    p.go()
    acq = fb.wait_for("acquire")  # the graph's launch runs work: gated
    g = fb.grant(acq)
    _, t = p.expect("graph_launch CUDA_SUCCESS")
    assert t >= g["t"], "the graph's launch returned before the grant was sent"
    p.expect("ssync CUDA_SUCCESS")
    assert p.wait() == 0
    assert all(r["start_ns"] >= g["t"] for r in kernels(sim))


def test_two_gpus_are_granted_separately(fb, probe, sim):
    p = probe(["init", "0", "init", "1", "use", "0", "launch", "L", "1000", "kzero", "sync",
               "use", "1", "launch", "L", "1000", "kone", "sync", "end"],
              GPUSHARE_SIM_DEVICES=2)
    join = fb.wait_for("join")["msg"]
    assert len(join["devices"]) == 2 and join["devices"][0] != join["devices"][1]
    a0 = fb.wait_for("acquire")
    assert a0["msg"]["device"] == join["devices"][0]
    fb.grant(a0)
    p.expect("launched kzero CUDA_SUCCESS")
    a1 = fb.wait_for("acquire", pred=lambda m: m["device"] == join["devices"][1])
    assert not p.printed("launched kone"), "GPU 1 was used on GPU 0's grant"
    g1 = fb.grant(a1)
    _, t = p.expect("launched kone CUDA_SUCCESS")
    assert t >= g1["t"]
    assert p.wait() == 0
    (k,) = kernels(sim, "kone")
    assert k["start_ns"] >= g1["t"]
    devs = {r["msg"]["device"] for r in fb.messages("release")}
    assert devs == set(join["devices"]), "both grants released at exit"


def test_disabled_is_pure_pass_through(fb, probe, sim):
    p = probe(["init", "launch", "L", "1000", "sync", "gate", "end"], GPUSHARE_DISABLE=1)
    fields, _ = p.expect("gate")
    assert fields[1] == "2"
    assert p.wait() == 0
    assert fb.count() == 0, "GPUSHARE_DISABLE=1 still talked to the broker"
    assert p.stderr() == ""


def test_python_ctypes_program_is_gated(fb, tmp_path, sim, endpoint):
    # ctypes finds every function with dlsym on its dlopen("libcuda.so.1")
    # handle: the hook's wrappers, so the launch waits for the grant.
    prog = ("import ctypes, gpusim\n"
            "gpusim.init()\n"
            "print('init', flush=True)\n"
            "gpusim.launch(us=1000, name='kpy')\n"
            "gpusim.synchronize()\n"
            "calls = ctypes.CDLL(None).gpushare_hook_calls\n"
            "calls.restype = ctypes.c_longlong\n"
            "print('launches', calls(b'cuLaunchKernel'), flush=True)\n")
    with hooked_python(sim, endpoint, prog) as proc:
        acq = fb.wait_for("acquire")
        assert not kernels(sim)
        g = fb.grant(acq)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "launches 1" in out
    (k,) = kernels(sim, "kpy")
    assert k["start_ns"] >= g["t"]


def test_passthrough_bypasses_the_gate_until_turned_off(fb, tmp_path, sim, endpoint):
    # gpushare_hook_passthrough (the evaluation's in-process A/B of the
    # hook's cost): while on, a launch goes straight to the driver with no
    # grant and no acquire, and the wrappers count nothing; turned off, the
    # next launch waits for its grant again.
    prog = ("import ctypes, gpusim\n"
            "gpusim.init()\n"
            "hook = ctypes.CDLL(None)\n"
            "hook.gpushare_hook_calls.restype = ctypes.c_longlong\n"
            "print('was', hook.gpushare_hook_passthrough(1), flush=True)\n"
            "gpusim.launch(us=1000, name='kfree')\n"
            "gpusim.synchronize()\n"
            "print('bypassed', hook.gpushare_hook_calls(b'cuLaunchKernel'), flush=True)\n"
            "print('was', hook.gpushare_hook_passthrough(0), flush=True)\n"
            "gpusim.launch(us=1000, name='kgated')\n"
            "gpusim.synchronize()\n"
            "print('gated', hook.gpushare_hook_calls(b'cuLaunchKernel'), flush=True)\n")
    with hooked_python(sim, endpoint, prog) as proc:
        acq = fb.wait_for("acquire")
        (free,) = kernels(sim, "kfree")
        assert free["start_ns"] < acq["t"], "the bypassed launch waited for a grant"
        assert not kernels(sim, "kgated"), "the launch after passthrough(0) did not wait"
        g = fb.grant(acq)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.split("\n")[:4] == ["was 0", "bypassed 0", "was 1", "gated 1"], out
    (k,) = kernels(sim, "kgated")
    assert k["start_ns"] >= g["t"]
