"""Dead clients and a restarted broker, end to end with the real hook on
the simulated GPU: a holder killed with SIGKILL gives its grant (and its
memory) back at once, a silent one after three heartbeat intervals, and
hooks come back by themselves to a broker that restarts.

"At once" is told apart from "after a while" by what the broker says
caused it (its event log's client_gone) and by giving the slower causes no
chance: with heartbeats 10 minutes apart, neither the periodic check nor
three silent intervals can be what noticed a death within the test."""
import os
import signal
import time

import pytest

import gstest
from gstest import Client, Worker, hook_env, kernels, session_of, wait_until


pytestmark = [pytest.mark.sim(concurrency=4), pytest.mark.broker("--policy", "exclusive")]


def _holder_and_waiter(broker, workers):
    a = workers("a")
    a.expect("first")
    b = workers("b")
    wait_until(lambda: broker.status()["gpus"][0]["waiting"], what="b waiting")
    return a, b


@pytest.mark.broker("--policy", "exclusive", config="heartbeat_ms = 600000")
def test_killed_holder_is_reclaimed_at_once(broker, sim, workers):
    a, b = _holder_and_waiter(broker, workers)
    st = broker.status()
    a_session = session_of(st, a.pid)["id"]
    assert st["gpus"][0]["holders"] == [a_session]
    t_kill = time.monotonic_ns()
    a.proc.send_signal(signal.SIGKILL)  # not reaped yet: a zombie, as under a busy parent
    first = wait_until(lambda: kernels(sim, pid=b.pid), what="b's first kernel")[0]
    assert first["start_ns"] > t_kill
    gone = [e for e in broker.synced_events("client_gone") if e["pid"] == a.pid]
    assert gone and gone[0]["session"] == a_session, broker.events("client_gone")
    assert gone[0]["why"] in ("its process died", "its connection is gone"), gone
    a.kill()
    gpu = broker.status()["gpus"][0]
    assert a_session not in [s["id"] for s in gpu["sessions"]], "the dead session lingers"
    assert gpu["holders"] == [session_of(broker.status(), b.pid)["id"]]
    assert "its process died" in broker.log() or "is gone" in broker.log()


def test_silent_holder_is_dropped_after_three_heartbeats(broker, sim, workers):
    # A hook that holds the GPU and then says nothing more (a hung process
    # whose connection stays open): a raw client that joined and acquired.
    gpu = broker.status()["gpus"][0]["uuid"]
    silent = Client(broker.endpoint, "hook")
    try:
        silent.call({"type": "join", "pid": os.getpid(), "devices": [gpu]})
        t_last = time.monotonic_ns()  # before the last message the broker gets from it
        assert silent.call({"type": "acquire", "device": gpu})["type"] == "grant"
        b = workers("b")
        first = wait_until(lambda: kernels(sim, pid=b.pid), what="b's first kernel")[0]
        # Dropped for its silence (the broker says so), and not before three
        # heartbeat intervals (1 s) after the last it heard from it.
        gone = [e for e in broker.synced_events("client_gone") if e["pid"] == os.getpid()]
        assert [e["why"] for e in gone] == ["silent for 3 heartbeat intervals"], gone
        assert "silent for 3 heartbeat intervals" in broker.log()
        waited = (first["start_ns"] - t_last) / 1e9
        assert waited >= 3, "b got the GPU %.2f s after the holder went silent" % waited
    finally:
        silent.close()


def test_hooks_come_back_to_a_restarted_broker(short_tmp, sim, tmp_path):
    b = gstest.Broker(short_tmp, sim).start()
    w = Worker(hook_env(sim, b.endpoint), "loop", 2000, "a", tmp_path)
    try:
        w.expect("first")
        wait_until(lambda: (session_of(b.status(), w.pid) or {}).get("grants"), what="a grant")
        b.stop()
        n = len(kernels(sim, pid=w.pid))
        wait_until(lambda: len(kernels(sim, pid=w.pid)) > n + 10, what="work without a broker")
        b = gstest.Broker(short_tmp, sim).start()
        s = wait_until(lambda: (session_of(b.status(), w.pid) or {}).get("grants") and
                       session_of(b.status(), w.pid), what="the hook back with a grant")
        assert s["state"] in ("running", "idle")
        n = len(kernels(sim, pid=w.pid))
        wait_until(lambda: len(kernels(sim, pid=w.pid)) > n + 10, what="work under the new broker")
        assert "lost the gpushare broker" in w.stderr()
    finally:
        w.kill()
        b.stop()


# A launcher's watcher as far as the broker sees it: registers a kernel
# (the pid it is given), reports a cell busy, says so, and then says
# nothing more until it is killed.
WATCHER = r"""
import json, os, sys, zmq
endpoint, kernel_pid, kernel_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = zmq.Context().socket(zmq.DEALER)
s.connect(endpoint)
def call(msg, seq):
    s.send(json.dumps(dict(msg, v=1, seq=seq)).encode())
    while True:
        reply = json.loads(s.recv())
        if reply.get("seq") == seq:
            return reply
call({"type": "hello", "role": "launcher", "pid": os.getpid()}, 1)
session = call({"type": "register", "kernel_id": kernel_id, "user": "u",
                "pid": kernel_pid}, 2)["session"]
s.send(json.dumps({"v": 1, "type": "cell", "session": session, "state": "busy",
                   "msg_id": "m-1"}).encode())
call({"type": "status"}, 3)  # the cell is in before we say so
print("registered", session, flush=True)
sys.stdin.read()
"""


def _stand_in_kernel(tmp_path, env):
    """A process that lives until it is killed (a kernel, as the broker
    sees one that never touched the GPU)."""
    return gstest.Proc([gstest.PYTHON, "-c", "import sys; sys.stdin.read()"], env, tmp_path,
                       "kernel-%s" % os.urandom(3).hex())


def _watcher(broker, tmp_path, kernel, kernel_id):
    w = gstest.Proc([gstest.PYTHON, "-c", WATCHER, broker.endpoint, str(kernel.pid), kernel_id],
                    broker.env, tmp_path, "watcher-" + kernel_id)
    session = w.expect("registered ").split()[1]
    assert broker.sessions()[session]["cell"] == "busy"
    return w, session


def _event(broker, kind, session, what, **fields):
    """The first record of kind for session (with these fields) in the
    broker's event log, awaited."""
    return wait_until(lambda: [e for e in broker.events(kind) if e["session"] == session and
                               all(e.get(k) == v for k, v in fields.items())], what=what)[0]


def test_a_killed_watcher_does_not_leave_its_session_busy(broker, tmp_path):
    """Issue 15: a launcher's watcher killed with SIGKILL sent neither its
    cell idle nor its unregister, and the session stayed "cell busy" for
    ever, also after its kernel was gone."""
    kernel = _stand_in_kernel(tmp_path, broker.env)
    w, session = _watcher(broker, tmp_path, kernel, "k-watched")
    try:
        w.proc.kill()
        # The kernel lives on: its cells are no longer reported, so the
        # busy cell is over, and the session stays.
        idle = _event(broker, "cell", session, "the cell to end with its watcher", state="idle")
        assert idle["state"] == "idle" and "its launcher (pid %d) is gone" % w.pid in idle["why"]
        entry = broker.sessions()[session]
        assert entry["cell"] == "idle"
        t_kernel = time.time()
        kernel.kill()
        gone = _event(broker, "session_gone", session, "the session to end")
        assert gone["ts"] >= t_kernel, "the session ended while its kernel still ran"
        assert "no process of it is left" in gone["why"]
        assert session not in broker.sessions()
        assert "session %s ended: no process of it is left" % session in broker.log()
    finally:
        w.kill()
        kernel.kill()


def test_a_session_lives_while_a_process_of_it_does(broker, tmp_path):
    """Launcher and kernel gone, a hook of the session still connected (a
    process the kernel started, say): the session ends only when that one
    is gone too."""
    gpu = broker.status()["gpus"][0]["uuid"]
    kernel = _stand_in_kernel(tmp_path, broker.env)
    w, session = _watcher(broker, tmp_path, kernel, "k-hooked")
    hook = Client(broker.endpoint, "hook")  # this process: alive throughout
    try:
        assert hook.call({"type": "join", "pid": os.getpid(), "session": session,
                          "devices": [gpu]})["type"] == "ok"
        w.proc.kill()
        kernel.kill()
        _event(broker, "cell", session, "the cell to end with its watcher", state="idle")
        kernel.wait()
        # Ended only by the hook's leaving, which the broker handles after
        # everything before it.
        t_hook = time.time()
        hook.send({"type": "release", "device": gpu, "grant_id": 1, "reason": "exit"})
        gone = _event(broker, "session_gone", session, "the session to end")
        assert gone["ts"] >= t_hook, "the session ended while its hook was connected"
        assert session not in broker.sessions()
    finally:
        hook.close()
        w.kill()
        kernel.kill()


@pytest.mark.broker("--policy", "exclusive", config="heartbeat_ms = 300")
def test_a_stalled_holder_finds_its_grant_gone_and_joins_again(broker, sim, workers):
    """Issue 15: a holder stopped for longer than the broker waits for a
    heartbeat (SIGSTOP here; a debugger, a frozen cgroup, a swap storm) is
    dropped and the waiter granted.  Once it runs again it must not go on
    under its old grant: it fences itself (gate closed, drained), joins
    again with its memory, and runs only under a new grant."""
    a = workers("a", mode="commands", GPUSHARE_IDLE_RELEASE_MS=0)  # keeps its grant while idle
    a.send("alloc x %d" % (64 << 20))
    a.wait_count("ok", 1)
    a.send("run 3")
    a.wait_count("ok", 2)
    a_session = session_of(broker.status(), a.pid)["id"]
    assert broker.status()["gpus"][0]["holders"] == [a_session]
    b = workers("b")
    wait_until(lambda: broker.status()["gpus"][0]["waiting"], what="b waiting")
    t_stop = time.monotonic_ns()
    a.proc.send_signal(signal.SIGSTOP)  # a sits idle in its stdin: nothing of it is on the way
    try:
        gone = _event(broker, "client_gone", a_session, "a dropped for its silence")
        assert gone["pid"] == a.pid and gone["why"] == "silent for 3 heartbeat intervals"
        b.expect("first")  # the GPU went to b
    finally:
        a.proc.send_signal(signal.SIGCONT)
    # It notices by itself (its own silence), drains, and joins again.
    joined = wait_until(lambda: [e for e in broker.events("join")
                                 if e["pid"] == a.pid and e["ts"] > gone["ts"]],
                        what="a joining again")
    assert joined[0]["epoch"] > 1
    assert "this process did not run for" in a.stderr()
    assert "the GPU grant is gone: draining and joining the gpushare broker again" in a.stderr()
    back = wait_until(lambda: (session_of(broker.status(), a.pid) or {}).get("resident_bytes"),
                      what="a's memory counted again")
    assert back >= 64 << 20
    # It needs the GPU again, which b holds: it waits (it ran before the
    # stop only), and runs once b is gone.
    a.send("run 3")
    wait_until(lambda: len(broker.status()["gpus"][0]["waiting"]) == 1, what="a waiting")
    b.kill()
    a.wait_count("ok", 3)
    b_kernels = kernels(sim, pid=b.pid)
    a_late = [k for k in kernels(sim, pid=a.pid) if k["start_ns"] > t_stop]
    assert len(a_late) == 3
    assert all(k["start_ns"] > b_kernels[-1]["start_ns"] for k in a_late), \
        "a ran while b held the GPU"
