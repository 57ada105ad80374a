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
