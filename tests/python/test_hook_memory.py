"""Device memory: the hook counts what the process holds on each GPU on
every allocation and free path and tells the broker (`memory`, at most every
50 ms, always the latest value); it can serve device allocations with managed
memory (GPUSHARE_MEMORY=managed), cap the process (GPUSHARE_MEMORY_LIMIT),
and, when an allocation does not fit, ask the broker to make room and retry.
"""
import functools
import json
import os
import subprocess
import sys

import pytest

import gstest

M = 1 << 20


pytestmark = pytest.mark.sim(memory="64M")


@pytest.fixture
def brokers(fake_brokers):
    """brokers(on_make_room=None, **options): FakeBrokers that grant at once
    and answer make_room through on_make_room(msg) (the room reply's
    fields, or None for no reply)."""
    return functools.partial(fake_brokers, auto_grant=True)


def used(m):
    return m["used_bytes"]


def result(p, prefix):
    """(index, CUresult name) of the next line starting with prefix."""
    fields, t = p.expect(prefix)
    return int(fields[1]), fields[2], t


# ---- accounting --------------------------------------------------------------


def test_every_path_is_counted(brokers, probe):
    b = brokers()
    # (steps, footprint after them, of which managed)
    plan = [
        (["alloc", "1M"], 1 * M, 0),
        (["pitch", "1000", "100"], 1 * M + 1024 * 100, 0),  # the pitch the driver chose
        (["aalloc", "L", "2M"], 3 * M + 102400, 0),
        (["managed", "1M"], 4 * M + 102400, 1 * M),
        (["afree", "2", "L"], 2 * M + 102400, 1 * M),
        (["free", "0"], 1 * M + 102400, 1 * M),
        (["free", "1", "free", "3"], 0, 0),
        (["vcreate", "4M", "vmap", "0"], 4 * M, 0),  # physical memory once, not per mapping
        (["vrelease", "0"], 4 * M, 0),  # still mapped: not freed yet
        (["vunmap", "0"], 0, 0),  # the last mapping goes: now it is
        (["vcreate", "2M", "vrelease", "1"], 0, 0),  # never mapped: freed at release
        (["alloc1", "64K"], 64 << 10, 0),  # the 32-bit ABI
        (["palloc", "L", "2M"], 2 * M + (64 << 10), 0),  # from a memory pool (index 5)
        (["afree", "5", "L"], 64 << 10, 0),
        (["newctx", "alloc", "3M"], 3 * M + (64 << 10), 0),
        (["delctx"], 64 << 10, 0),  # a context takes its memory with it
    ]
    steps = ["init"]
    for s, _, _ in plan:
        steps += s + ["hookmem", "wait"]
    steps += ["end"]
    p = probe(steps)
    peak, before, n = 0, (0, 0), 0
    for s, want, managed in plan:
        peak = max(peak, want)
        fields, _ = p.expect("hookmem")
        assert fields[1:] == ["0", str(want), str(managed), str(peak)], (s, fields)
        p.expect("wait")
        if (want, managed) != before:  # the broker hears of every change
            r = b.wait_for("memory", after=n,
                           pred=lambda m: used(m) == want and m["managed_bytes"] == managed)
            assert r["msg"]["peak_bytes"] == peak
        before = (want, managed)
        n = b.count()
        p.go()
    assert p.wait() == 0
    last = b.messages("memory")[-1]["msg"]
    assert used(last) == 64 << 10 and last["peak_bytes"] == 4 * M + 102400
    assert last["device"] == b.messages("join")[0]["msg"]["devices"][0]


def test_footprint_matches_the_hooks_count(brokers, probe):
    brokers()
    p = probe(["init", "alloc", "3M", "managed", "1M", "hookmem", "end"])
    fields, _ = p.expect("hookmem")
    assert fields[1:] == ["0", str(4 * M), str(1 * M), str(4 * M)]
    assert p.wait() == 0


def test_reports_are_rate_limited_and_end_with_the_latest(brokers, probe):
    b = brokers()
    # 10 rounds of 10 allocations, 10 ms apart: ~100 changes in 100 ms or more
    steps = ["init"]
    for _ in range(10):
        steps += ["allocs", "10", "4K", "sleep", "10"]
    steps += ["wait", "alloc", "1M", "wait", "end"]
    p = probe(steps)
    _, t_first = p.expect("init")
    p.expect("wait")
    final = b.wait_for("memory", pred=lambda m: used(m) == 100 * 4096)
    t_last = max(p.times_of("allocs "))
    reports = b.messages("memory")
    assert reports[-1] is final
    # At most one report per 50 ms of the hook's own time while it changed
    # (between the probe's "init" and its last "allocs" line: the same
    # clock), and the latest value after the last change.
    assert 2 <= len(reports) <= (t_last - t_first) / 50e6 + 2, \
        ([used(r["msg"]) for r in reports], (t_last - t_first) / 1e6)
    # Nothing stale comes after the latest value: the next report is of
    # the next change.
    n = b.count()
    p.go()
    p.expect("alloc")
    nxt = b.wait_for("memory", after=n)
    assert used(nxt["msg"]) == 100 * 4096 + M, "a report came after the latest"
    assert b.messages("memory")[len(reports)] is nxt
    p.go()
    assert p.wait() == 0


def test_a_new_broker_is_told_the_footprint(brokers, probe):
    p = probe(["init", "alloc", "2M", "wait", "end"])
    p.expect("wait")  # no broker yet: counted all the same
    b = brokers()
    r = b.wait_for("memory")
    assert used(r["msg"]) == 2 * M
    p.go()
    assert p.wait() == 0


# ---- managed mode ---------------------------------------------------------------

CHECKPOINT = r"""
import ctypes, json, sys
lib = ctypes.CDLL("libcuda.so.1")
class Lock(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint),
                ("reserved1", ctypes.c_uint64 * 7)]
pid = int(sys.argv[1])
rc = {"lock": lib.cuCheckpointProcessLock(pid, ctypes.byref(Lock(5000)))}
if rc["lock"] == 0:
    rc["checkpoint"] = lib.cuCheckpointProcessCheckpoint(pid, None)
    if rc["checkpoint"] == 0:
        rc["restore"] = lib.cuCheckpointProcessRestore(pid, None)
    rc["unlock"] = lib.cuCheckpointProcessUnlock(pid, None)
print(json.dumps(rc))
"""

CUDA_ERROR_NOT_SUPPORTED = 801


def checkpoint(sim, pid):
    """Asks the simulator to checkpoint process pid (as the broker parks a
    session); returns each step's CUresult."""
    env = dict(sim)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([sys.executable, "-c", CHECKPOINT, str(pid)], env=env,
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("mode", ["managed", "device"])
def test_managed_mode_serves_device_allocations_with_managed_memory(brokers, probe, sim, mode):
    b = brokers()
    p = probe(["init", "alloc", "2M", "pitch", "1000", "10", "wait", "frees", "end"],
              GPUSHARE_MEMORY=mode)
    pid = int(p.expect("start")[0][1].split("=")[1])
    assert result(p, "alloc")[1] == "CUDA_SUCCESS"
    assert result(p, "pitch")[1] == "CUDA_SUCCESS"
    p.expect("wait")
    assert b.wait_for("join")["msg"]["memory_mode"] == mode
    total = 2 * M + 1024 * 10
    r = b.wait_for("memory", pred=lambda m: used(m) == total)
    rc = checkpoint(sim, pid)
    if mode == "managed":
        assert r["msg"]["managed_bytes"] == total
        # the simulator, like the driver, cannot checkpoint managed memory
        assert rc["checkpoint"] == CUDA_ERROR_NOT_SUPPORTED, rc
    else:
        assert r["msg"]["managed_bytes"] == 0
        assert rc == {"lock": 0, "checkpoint": 0, "restore": 0, "unlock": 0}, rc
    p.go()
    p.expect("frees CUDA_SUCCESS")
    assert p.wait() == 0


# ---- the limit ---------------------------------------------------------------------


def test_limit_refuses_allocations_past_it_and_shows_in_mem_info(brokers, probe):
    b = brokers(on_make_room=lambda m: {"ok": True})
    p = probe(["init", "meminfo", "totalmem", "alloc", "6M", "alloc", "4M", "meminfo",
               "vcreate", "4M", "vcreate", "2M", "alloc", "1", "free", "0", "alloc", "4M",
               "meminfo", "end"], GPUSHARE_MEMORY_LIMIT="8M")
    fields, _ = p.expect("meminfo")
    assert fields[1:] == ["CUDA_SUCCESS", str(8 * M), str(8 * M)]
    fields, _ = p.expect("totalmem")
    assert fields[1:] == ["CUDA_SUCCESS", str(8 * M)]
    assert result(p, "alloc")[1] == "CUDA_SUCCESS"
    assert result(p, "alloc")[1] == "CUDA_ERROR_OUT_OF_MEMORY"
    fields, _ = p.expect("meminfo")
    assert fields[1:] == ["CUDA_SUCCESS", str(2 * M), str(8 * M)]
    assert result(p, "vcreate")[1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert result(p, "vcreate")[1] == "CUDA_SUCCESS"  # exactly up to the limit
    assert result(p, "alloc")[1] == "CUDA_ERROR_OUT_OF_MEMORY"
    p.expect("free 0 CUDA_SUCCESS")
    assert result(p, "alloc")[1] == "CUDA_SUCCESS"
    fields, _ = p.expect("meminfo")
    assert fields[1:] == ["CUDA_SUCCESS", str(2 * M), str(8 * M)]  # 4M + 2M used
    assert p.wait() == 0
    assert not b.messages("make_room"), "the limit is the hook's own: no broker can help"


def test_limit_above_the_device_changes_nothing(brokers, probe):
    brokers()
    p = probe(["init", "meminfo", "alloc", "8M", "meminfo", "end"], GPUSHARE_MEMORY_LIMIT="1G")
    fields, _ = p.expect("meminfo")
    assert fields[1:] == ["CUDA_SUCCESS", str(64 * M), str(64 * M)]
    fields, _ = p.expect("meminfo")
    assert fields[1:] == ["CUDA_SUCCESS", str(56 * M), str(64 * M)]
    assert p.wait() == 0


@pytest.mark.parametrize("var,value", [("GPUSHARE_MEMORY_LIMIT", "lots"),
                                       ("GPUSHARE_MEMORY_LIMIT", "-5G"),
                                       ("GPUSHARE_CONTEXT_ROOM", "0"),
                                       ("GPUSHARE_CONTEXT_ROOM", "1 GiB"),
                                       ("GPUSHARE_MEMORY", "unified")])
def test_malformed_settings_are_named_and_ignored(brokers, probe, var, value):
    brokers()
    p = probe(["init", "alloc", "32M", "meminfo", "end"], **{var: value})
    assert result(p, "alloc")[1] == "CUDA_SUCCESS"
    fields, _ = p.expect("meminfo")
    assert fields[1:] == ["CUDA_SUCCESS", str(32 * M), str(64 * M)]
    assert p.wait() == 0
    lines = [line for line in p.stderr().splitlines() if line.strip()]
    assert len(lines) == 1 and var in lines[0] and value in lines[0], lines


# ---- make_room -----------------------------------------------------------------------


class Holder:
    """Another process of the simulated GPU holding memory until told to
    let go (gpusim.py alloc --hold, no hook)."""

    def __init__(self, sim, nbytes):
        env = dict(sim)
        env.pop("LD_PRELOAD", None)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(gstest.GPUSIM_DIR, "gpusim.py"), "alloc", str(nbytes),
             "--hold"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert json.loads(self.proc.stdout.readline())["bytes"] == nbytes

    def release(self):
        self.proc.stdin.close()
        return self.proc.wait(10)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def holder(sim):
    held = []

    def start(nbytes):
        h = Holder(sim, nbytes)
        held.append(h)
        return h

    yield start
    for h in held:
        h.kill()


def test_make_room_then_retry(brokers, probe, holder):
    h = holder(48 * M)
    asked = []

    def make_room(msg):
        asked.append(msg)
        assert h.release() == 0  # e.g. an idle session parked
        return {"ok": True, "free_bytes": 64 * M}

    b = brokers(on_make_room=make_room)
    p = probe(["init", "alloc", "32M", "hookmem", "end"])
    assert result(p, "alloc")[1] == "CUDA_SUCCESS"
    (req,) = asked
    assert req["bytes"] == 32 * M
    assert req["device"] == b.messages("join")[0]["msg"]["devices"][0]
    fields, _ = p.expect("hookmem")
    assert fields[2] == str(32 * M)
    assert p.wait() == 0


def test_make_room_for_every_kind_of_allocation(brokers, probe, holder):
    holders = []
    asked = []

    def make_room(msg):
        asked.append(msg["bytes"])
        holders[-1].release()
        return {"ok": True}

    brokers(on_make_room=make_room)
    p = probe(["init", "wait", "pitch", "2048", "16K", "free", "0",
               "wait", "vcreate", "32M", "vrelease", "0",
               "wait", "aalloc", "L", "30M", "end"])
    for step in ("pitch", "vcreate", "aalloc"):
        p.expect("wait")
        holders.append(holder(48 * M))  # someone else holds the GPU's memory meanwhile
        p.go()
        assert result(p, step)[1] == "CUDA_SUCCESS", step
    assert asked == [2048 * 16 * 1024, 32 * M, 30 * M]
    assert p.wait() == 0


def test_refused_room_is_out_of_memory(brokers, probe, holder):
    holder(48 * M)
    b = brokers(on_make_room=lambda m: {"ok": False, "free_bytes": 16 * M,
                                        "reason": "all other sessions are busy"})
    p = probe(["init", "alloc", "32M", "end"])
    assert result(p, "alloc")[1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert p.wait() == 0
    assert len(b.messages("make_room")) == 1
    assert "all other sessions are busy" in p.stderr()


# A wait for room longer than any test: an allocation that returns did not
# end its wait by this timeout, but for the reason the test is about.
FOREVER_MS = 3600 * 1000


def test_no_broker_is_out_of_memory_at_once(probe, holder, endpoint):
    holder(48 * M)
    p = probe(["init", "sync", "alloc", "32M", "end"], GPUSHARE_MAKE_ROOM_TIMEOUT_MS=FOREVER_MS)
    _, err, _ = result(p, "alloc")
    assert err == "CUDA_ERROR_OUT_OF_MEMORY"  # and it did not wait for a broker that is not there
    assert p.wait() == 0


def test_an_allocation_waiting_for_room_is_a_wait(brokers, probe, holder):
    """gpushare_hook_wait_state: the allocation waits for room (the GPU is
    full, the broker makes room), for its size; the room given, the wait
    is over and counted."""
    h = holder(48 * M)
    b = brokers(on_make_room=lambda m: None)  # answered below
    p = probe(["waitwatch", "init", "alloc", "32M", "wait", "end"])  # alive until looked at
    st = gstest.wait_states(p, lambda s: s["waiting"])
    (d,) = st["devices"]
    assert (d["state"], d["room_bytes"]) == ("room", 32 * M)
    asked = b.wait_for("make_room")
    assert h.release() == 0
    b.send(asked["ident"], {"v": 1, "type": "room", "seq": asked["msg"]["seq"],
                            "device": asked["msg"]["device"], "ok": True})
    assert result(p, "alloc")[1] == "CUDA_SUCCESS"
    st = gstest.wait_states(p, lambda s: s["devices"] and s["devices"][0]["waits"] == 1)
    assert st["devices"][0]["state"] == "none" and not st["waiting"]
    p.go()
    assert p.wait() == 0


def test_silent_broker_times_out(brokers, probe, holder):
    holder(48 * M)
    b = brokers(on_make_room=lambda m: None)  # never answers
    p = probe(["init", "sync", "alloc", "32M", "end"], GPUSHARE_MAKE_ROOM_TIMEOUT_MS=300)
    _, t_before = p.expect("sync")
    _, err, t_after = result(p, "alloc")
    assert err == "CUDA_ERROR_OUT_OF_MEMORY"
    # Not before the timeout (both times are the probe's); nothing but the
    # timeout could end it: the broker stayed, connected and silent.
    assert t_after - t_before >= 300e6
    (asked,) = b.messages("make_room")
    assert not [r for r in b.messages("_disconnected", direction="event")
                if asked["t"] < r["t"] < t_after]
    assert p.wait() == 0


def test_lost_broker_ends_the_wait(brokers, probe, holder):
    holder(48 * M)
    b = brokers(on_make_room=lambda m: None)
    p = probe(["init", "sync", "alloc", "32M", "end"], GPUSHARE_MAKE_ROOM_TIMEOUT_MS=FOREVER_MS)
    b.wait_for("make_room")  # the allocation waits for the answer now
    b.stop()
    _, err, _ = result(p, "alloc")
    assert err == "CUDA_ERROR_OUT_OF_MEMORY"
    assert p.wait() == 0


def test_managed_mode_does_not_ask_for_room(brokers, probe, holder):
    holder(48 * M)
    b = brokers(on_make_room=lambda m: {"ok": True})
    p = probe(["init", "alloc", "32M", "end"], GPUSHARE_MEMORY="managed")
    assert result(p, "alloc")[1] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert p.wait() == 0
    assert not b.messages("make_room")
