"""Servers with several GPUs (issue 18): the broker places each session on
a GPU when its first process starts the driver, and every process of the
session sees that GPU (CUDA_VISIBLE_DEVICES by UUID, set by the hook
before the real cuInit), on a simulated machine of four GPUs.  spread puts
sessions on the emptiest GPU, pack fills the first before the next; a
spawner's CUDA_VISIBLE_DEVICES is left as it is; GPUSHARE_GPUS asks for
more than one."""
import json
import os
import pwd
import subprocess
import sys

import pytest

import gstest

pytestmark = pytest.mark.sim(extra={"GPUSHARE_SIM_DEVICES": "4"})

# A process of a session: what the driver shows it, by UUID.
PROBE = r"""
import ctypes, json, os, sys
lib = ctypes.CDLL("libcuda.so.1")
rc = lib.cuInit(0)
n = ctypes.c_int(0)
lib.cuDeviceGetCount(ctypes.byref(n))
uuids = []
for i in range(n.value):
    d = ctypes.c_int(0)
    lib.cuDeviceGet(ctypes.byref(d), i)
    u = (ctypes.c_char * 16)()
    lib.cuDeviceGetUuid(u, d)
    h = bytes(u).hex()
    uuids.append("GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:]))
if len(sys.argv) > 1:  # "run": a kernel, so that the hook joins its session
    d, c, m, f = ctypes.c_int(0), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    lib.cuDeviceGet(ctypes.byref(d), 0)
    lib.cuDevicePrimaryCtxRetain(ctypes.byref(c), d)
    lib.cuCtxSetCurrent(c)
    lib.cuModuleLoadData(ctypes.byref(m), ctypes.c_char_p(b"gpusim dummy image"))
    lib.cuModuleGetFunction(ctypes.byref(f), m, b"k")
    one = ctypes.c_uint(1)
    assert lib.cuLaunchKernel(f, one, one, one, one, one, one, ctypes.c_uint(0), None, None,
                              None) == 0
    assert lib.cuCtxSynchronize() == 0
libc = ctypes.CDLL(None)  # the C environment: os.environ is a copy taken at start
libc.getenv.restype = ctypes.c_char_p
v = libc.getenv(b"CUDA_VISIBLE_DEVICES")
print(json.dumps({"rc": rc, "visible": v.decode() if v else None, "uuids": uuids,
                  "os_environ": os.environ.get("CUDA_VISIBLE_DEVICES")}))
"""


def probe(broker, sim, session, run=False, **extra):
    env = gstest.hook_env(sim, broker.endpoint, GPUSHARE_SESSION=session, **extra)
    r = subprocess.run([sys.executable, "-c", PROBE] + (["run"] if run else []), env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["rc"] == 0, out
    # Placed when the process loaded, before Python copied its environment:
    # PyTorch counts GPUs by os.environ (NVML) before the driver starts.
    assert out["os_environ"] == out["visible"], out
    return out


def all_gpus(broker):
    return [g["uuid"] for g in broker.status()["gpus"]]


@pytest.mark.parametrize("ngpus", [
    pytest.param(4, marks=pytest.mark.sim(extra={"GPUSHARE_SIM_DEVICES": "4"})),
    pytest.param(8, marks=pytest.mark.sim(extra={"GPUSHARE_SIM_DEVICES": "8"})),
])
def test_spread_puts_each_session_on_the_emptiest_gpu(broker, sim, ngpus):
    gpus = all_gpus(broker)
    assert len(gpus) == ngpus
    seen = [probe(broker, sim, "s%d" % i)["uuids"] for i in range(ngpus)]
    assert all(len(s) == 1 for s in seen), seen
    assert sorted(s[0] for s in seen) == sorted(gpus)  # one each
    # A second process of a session sees its session's GPU, not a new one.
    again = probe(broker, sim, "s2")
    assert again["uuids"] == seen[2] and again["visible"] == seen[2][0]
    placed = [e for e in broker.synced_events() if e["event"] == "placed"]
    assert [e["session"] for e in placed] == ["s%d" % i for i in range(ngpus)], placed
    assert all(e["policy"] == "spread" for e in placed)
    assert broker.status()["config"]["placement"] == "spread"


def test_status_shows_a_notebook_on_its_gpu_only(broker, sim):
    gpus = all_gpus(broker)
    launcher = gstest.Client(broker.endpoint, "launcher")
    try:
        launcher.register("nb", os.getpid())
        where = probe(broker, sim, "nb")["uuids"]
        blocks = {g["uuid"]: [e["id"] for e in g["sessions"]] for g in broker.status()["gpus"]}
        assert [u for u in gpus if "nb" in blocks[u]] == where, blocks
        entry = next(e for g in broker.status()["gpus"] for e in g["sessions"] if e["id"] == "nb")
        assert entry["placed"] is True
    finally:
        launcher.close()


def test_pack_fills_one_gpu_first(broker, sim):
    broker.configure(placement="pack")
    gpus = all_gpus(broker)
    seen = [probe(broker, sim, "p%d" % i)["uuids"] for i in range(3)]
    assert seen == [[gpus[0]]] * 3, seen


def test_a_spawner_choice_and_a_count_are_kept(broker, sim):
    gpus = all_gpus(broker)
    # CUDA_VISIBLE_DEVICES from the spawner (a device plugin, a profile): kept.
    mine = probe(broker, sim, "k1", CUDA_VISIBLE_DEVICES="3")
    assert mine["uuids"] == [gpus[3]] and mine["visible"] == "3"
    assert "k1" not in [e.get("session") for e in broker.synced_events()
                        if e["event"] == "placed"]
    # GPUSHARE_GPUS=2: two GPUs, in GPU order.
    two = probe(broker, sim, "k2", GPUSHARE_GPUS="2")
    assert len(two["uuids"]) == 2 and two["uuids"] == sorted(two["uuids"], key=gpus.index)
    # Off: every GPU, nothing set.
    broker.configure(placement="off")
    off = probe(broker, sim, "k3")
    assert off["visible"] is None and off["uuids"] == gpus
    # Off in the process (GPUSHARE_PLACE=off): its hook's hello places
    # nothing either, though the broker places.
    broker.configure(placement="spread")
    mine = probe(broker, sim, "k4", run=True, GPUSHARE_PLACE="off")
    assert mine["visible"] is None and mine["uuids"] == gpus
    events = broker.synced_events()
    assert "k4" in [e.get("session") for e in events if e["event"] == "join"]
    assert "k4" not in [e.get("session") for e in events if e["event"] == "placed"]


ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.mark.broker(config="gpu_access = %s:2-3" % ME)
def test_an_admin_keeps_a_user_to_some_gpus(broker, sim):
    gpus = all_gpus(broker)
    seen = [probe(broker, sim, "u%d" % i)["uuids"][0] for i in range(4)]
    assert set(seen) == {gpus[2], gpus[3]}, seen  # spread, within GPUs 2 and 3


def test_bad_placement_setting_is_refused_by_name(broker):
    with pytest.raises(AssertionError) as e:
        broker.configure(placement="everywhere")
    assert "placement: must be spread, pack or off" in str(e.value)


@pytest.mark.sim(extra={"GPUSHARE_SIM_DEVICES": "1"})
def test_one_gpu_sets_nothing(broker, sim):
    out = probe(broker, sim, "only")
    assert out["visible"] is None and len(out["uuids"]) == 1


# A program on both GPUs of its session: a kernel on GPU `first`, "holding",
# then (after a line on stdin) kernels on both, in turn, and "done".
TWO = r"""
import ctypes, sys
lib = ctypes.CDLL("libcuda.so.1")
def ck(rc, what):
    if rc:
        raise SystemExit("%s: CUDA error %d" % (what, rc))
ck(lib.cuInit(0), "cuInit")
n = ctypes.c_int(0)
lib.cuDeviceGetCount(ctypes.byref(n))
assert n.value == 2, n.value
ctxs, funcs = [], []
for i in range(2):
    d, c, m, f = ctypes.c_int(0), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    ck(lib.cuDeviceGet(ctypes.byref(d), i), "cuDeviceGet")
    ck(lib.cuDevicePrimaryCtxRetain(ctypes.byref(c), d), "cuDevicePrimaryCtxRetain")
    ck(lib.cuCtxSetCurrent(c), "cuCtxSetCurrent")
    ck(lib.cuModuleLoadData(ctypes.byref(m), ctypes.c_char_p(b"gpusim dummy image")), "load")
    ck(lib.cuModuleGetFunction(ctypes.byref(f), m, b"step"), "cuModuleGetFunction")
    ctxs.append(c)
    funcs.append(f)
def run(i):
    ck(lib.cuCtxSetCurrent(ctxs[i]), "cuCtxSetCurrent")
    one = ctypes.c_uint(1)
    ck(lib.cuLaunchKernel(funcs[i], one, one, one, one, one, one, ctypes.c_uint(0), None, None,
                          None), "cuLaunchKernel")
    ck(lib.cuCtxSynchronize(), "cuCtxSynchronize")
first = int(sys.argv[1])
run(first)
print("holding", flush=True)
sys.stdin.readline()
for _ in range(5):
    run(1 - first)
    run(first)
print("done", flush=True)
"""


@pytest.mark.sim(extra={"GPUSHARE_SIM_DEVICES": "2"})
def test_two_sessions_of_two_gpus_never_deadlock(broker, sim, tmp_path):
    """Each session is placed on both GPUs and starts on the other one.
    Without gangs a would hold GPU 0 and b GPU 1 (exclusive, a 600 s
    quantum, no idle release), and each would wait for the other for ever.
    A gang takes its GPUs in order and holds them together: b waits for
    both, holding neither, until a is done."""
    broker.configure(policy="exclusive", tq=600)

    def start(session, first):
        env = gstest.hook_env(sim, broker.endpoint, GPUSHARE_SESSION=session, GPUSHARE_GPUS="2",
                              GPUSHARE_IDLE_RELEASE_MS="0")
        return gstest.Proc([sys.executable, "-c", TWO, str(first)], env, tmp_path, session)

    def where(key):
        return {g["uuid"]: g[key] for g in broker.status()["gpus"]}

    a = start("ga", 0)
    a.expect("holding")
    assert all(h == ["ga"] for h in where("holders").values()), where("holders")
    entries = [e for g in broker.status()["gpus"] for e in g["sessions"] if e["id"] == "ga"]
    assert len(entries) == 2 and all(e.get("gang") is True for e in entries), entries
    assert broker.cli("status").stdout.count("holds its GPUs together") == 2
    b = start("gb", 1)
    gstest.wait_until(lambda: all("gb" in w for w in where("waiting").values()),
                      what="gb waiting for both GPUs")
    assert all(h == ["ga"] for h in where("holders").values()), where("holders")
    a.send("go")
    a.expect("done")
    assert a.wait() == 0, a.stderr()
    b.expect("holding")
    b.send("go")
    b.expect("done")
    assert b.wait() == 0, b.stderr()
    joins = [e for e in broker.synced_events() if e["event"] == "placed"]
    assert sorted(e["session"] for e in joins) == ["ga", "gb"]
