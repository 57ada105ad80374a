"""The hook never makes a program worse off: without a broker (missing,
silent, lost, shutting down) it warns once and runs ungated, registers again
when a broker comes back, survives fork, exits promptly even while waiting
for the GPU, gives its grant back at exit, tells a waiting notebook who has
the GPU, and never writes to stdout."""
import os
import time

import pytest

import gstest
from gstest import kernels


def warnings(p):
    return [line for line in p.stderr().splitlines() if line.strip()]


def wait_stderr(p, text, timeout=30.0):
    """Waits until the probe's stderr (the hook's only channel) says text."""
    gstest.wait_for_text(p.stderr, text, timeout)


# ---- no broker -------------------------------------------------------------


def test_no_broker_runs_ungated_with_one_warning(probe, sim, endpoint):
    start = time.monotonic()
    p = probe(["init", "launch", "L", "1000", "sync", "launch", "L", "1000", "sync", "gate",
               "end"])
    fields, _ = p.expect("gate")
    assert fields[1] == "2", "not ungated"
    assert p.wait() == 0
    assert time.monotonic() - start < 3
    (w,) = warnings(p)
    assert "no gpushare broker" in w and endpoint in w and "warn" in w
    assert len(kernels(sim)) == 2


def test_silent_broker_fails_open_within_a_moment(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, welcome=False)
    p = probe(["init", "launch", "L", "1000", "kfirst", "sync", "end"])
    _, t0 = p.expect("launching kfirst")
    _, t1 = p.expect("launched kfirst CUDA_SUCCESS")
    assert t1 - t0 < 1e9, "a silent broker held the program up"
    assert p.wait() == 0
    b.wait_for("hello")
    (w,) = warnings(p)
    assert "no welcome" in w


def test_broker_appearing_later_is_joined(fake_brokers, probe, sim, endpoint):
    p = probe(["init", "launch", "L", "1000", "sync", "wait", "launch", "L", "1000", "klater",
               "sync", "end"])
    p.expect("wait")
    b = fake_brokers(endpoint)
    b.wait_for("hello", timeout=5)
    b.wait_for("join")
    p.go()
    acq = b.wait_for("acquire")
    with pytest.raises(AssertionError):
        p.expect("launched klater", timeout=0.3)
    g = b.grant(acq)
    p.expect("launched klater CUDA_SUCCESS")
    assert p.wait() == 0
    assert len(warnings(p)) == 1, p.stderr()
    (k,) = kernels(sim, "klater")
    assert k["start_ns"] >= g["t"]


def test_broker_lost_later_then_back(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "wait", "launch", "L", "1000", "kalone",
               "sync", "wait", "launch", "L", "1000", "kback", "sync", "end"])
    p.expect("wait")
    b.stop()
    wait_stderr(p, "lost the gpushare broker")
    p.go()
    p.expect("launched kalone CUDA_SUCCESS")  # ungated: nobody to ask
    p.expect("wait")
    b2 = fake_brokers(endpoint)
    b2.wait_for("join", timeout=5)
    p.go()
    acq = b2.wait_for("acquire")
    b2.grant(acq)
    p.expect("launched kback CUDA_SUCCESS")
    assert p.wait() == 0
    assert len(warnings(p)) == 1, p.stderr()


def test_shutdown_revoke_releases_at_once_and_fails_open(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "300000", "klong", "wait", "end"])
    p.expect("wait")
    grant = b.messages("grant", direction="out")[0]
    revoke = b.revoke(grant, reason="shutdown")
    rel = b.wait_for("release")
    assert rel["msg"]["reason"] == "revoked"
    assert rel["t"] - revoke["t"] < 0.2e9, "waited for the GPU for a broker that is going away"
    wait_stderr(p, "shutting down")
    p.go()
    assert p.wait() == 0


# ---- fork ------------------------------------------------------------------


def test_fork_child_without_cuda(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "fork", "nocuda", "launch", "L", "1000",
               "kafter", "sync", "end"])
    fields, _ = p.expect("forked nocuda")
    assert fields[-1] == "status=0"
    p.expect("launched kafter CUDA_SUCCESS")
    assert p.wait() == 0
    assert len(b.messages("hello")) == 1
    assert len(b.messages("acquire")) == 1, "the parent kept its grant across fork"


def test_fork_child_uses_cuda_afresh(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["fork", "cuda", "init", "launch", "L", "1000", "kparent", "sync", "end"])
    fields, _ = p.expect("forked cuda", timeout=10)
    assert fields[-1] == "status=0"
    p.expect("launched kparent CUDA_SUCCESS")
    assert p.wait() == 0
    pids = {r["msg"]["pid"] for r in b.messages("hello")}
    assert len(pids) == 2 and p.proc.pid in pids, "the child registered as a process of its own"
    assert len(kernels(sim, "child")) == 1


def test_fork_child_of_cuda_parent_does_not_hang(fake_brokers, probe, sim, endpoint):
    fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "fork", "cuda", "launch", "L", "1000",
               "kparent", "sync", "end"])
    p.expect("forked cuda", timeout=10)  # whatever CUDA says in the child, it returns
    p.expect("launched kparent CUDA_SUCCESS")
    assert p.wait() == 0


def test_child_does_not_keep_the_parents_connection(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "fork", "linger", "end"])
    p.expect("forked linger")
    assert p.wait() == 0
    # the parent is gone, its child (sleeping 3 s) is not: the broker sees
    # the connection close now, not when the child exits
    b.wait_for("_disconnected", timeout=2, direction="event")


# ---- exit ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["exit", "end"])
def test_exit_while_waiting_for_the_gpu(fake_brokers, probe, sim, endpoint, how):
    b = fake_brokers(endpoint)
    p = probe(["init", "bg_launch", "1000", "wait", how])
    b.wait_for("acquire")
    p.expect("wait")
    start = time.monotonic()
    p.go()
    assert p.wait(timeout=5) == 0
    assert time.monotonic() - start < 2
    assert not kernels(sim)


def test_exit_releases_the_grant(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "end"])
    assert p.wait() == 0
    rel = b.wait_for("release", timeout=2)
    grant = b.messages("grant", direction="out")[0]
    assert rel["msg"]["reason"] == "exit"
    assert rel["msg"]["grant_id"] == grant["msg"]["grant_id"]


# ---- messages ----------------------------------------------------------------


@pytest.mark.parametrize("info", [None, "held by alice (train.ipynb) for at most 3 s"])
def test_long_wait_says_so_once(fake_brokers, probe, sim, endpoint, info):
    b = fake_brokers(endpoint)
    b.ack_info = info
    p = probe(["init", "threads", "4", "1000", "end"])
    b.wait_for("acquire")
    wait_stderr(p, "waiting for", timeout=3)
    b.grant()
    p.expect("threads done")
    assert p.wait() == 0
    lines = [line for line in warnings(p) if "waiting for" in line]
    assert len(lines) == 1, p.stderr()
    if info:
        assert info in lines[0]
    else:
        assert "waiting for the GPU (held by another notebook)" in lines[0]


def test_nothing_on_stdout(fake_brokers, probe, sim, endpoint):
    fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "end"], GPUSHARE_LOG="debug")
    assert p.wait() == 0
    assert all(line is None or " t=" in line for line in p.lines), p.lines
    assert "debug" in p.stderr()


def test_hanging_broker_is_noticed_by_heartbeats(probe, sim, endpoint, tmp_path):
    # The broker process stops (SIGSTOP): its socket stays open, only the
    # ZMTP heartbeats go unanswered.  The hook must notice and fail open.
    import signal
    import subprocess
    import sys
    bp = subprocess.Popen([sys.executable, gstest.FAKEBROKER, endpoint, "--auto-grant"],
                          stdout=subprocess.PIPE, text=True)
    try:
        assert bp.stdout.readline().strip() == "ready"
        p = probe(["init", "launch", "L", "1000", "sync", "wait", "launch", "L", "1000", "kalone",
                   "sync", "end"])
        p.expect("wait")
        os.kill(bp.pid, signal.SIGSTOP)
        wait_stderr(p, "lost the gpushare broker", timeout=8)
        p.go()
        p.expect("launched kalone CUDA_SUCCESS")
        assert p.wait() == 0
    finally:
        os.kill(bp.pid, signal.SIGCONT)
        bp.terminate()
        bp.wait(5)


def test_heartbeats(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, heartbeat_ms=50)
    p = probe(["init", "wait", "end"])
    n = b.count()
    b.wait_for("heartbeat", after=n)
    b.wait_for("heartbeat", after=b.count())
    p.go()
    assert p.wait() == 0


def test_unknown_session_joins_without_it(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    orig = b._answer

    def answer(ident, msg):
        if msg.get("type") == "join" and msg.get("session"):
            b._send_now(ident, {"v": 1, "type": "error", "seq": msg["seq"],
                                "code": "unknown_session", "request_type": "join",
                                "message": "no session %s" % msg["session"]})
        else:
            orig(ident, msg)

    b._answer = answer
    p = probe(["init", "launch", "L", "1000", "sync", "end"], GPUSHARE_SESSION="s-gone")
    p.expect("launched k CUDA_SUCCESS")
    assert p.wait() == 0
    joins = [r["msg"] for r in b.messages("join")]
    assert joins[0]["session"] == "s-gone" and "session" not in joins[1]
    assert b.messages("acquire"), "gated after joining without the session"
    assert "s-gone" in p.stderr()
