"""The hook never makes a program worse off: without a broker (missing,
silent, lost, shutting down) it warns once and runs ungated, registers again
when a broker comes back, survives fork, exits promptly even while waiting
for the GPU, gives its grant back at exit, tells a waiting notebook who has
the GPU, and never writes to stdout.

No test here measures how fast: where the behaviour is "at once", the
cause is checked (the reason the hook gives, the order of events on one
clock), or the hook's own clock is: the heartbeats its I/O thread sends
(every heartbeat_ms of the broker's welcome), which do not run on while
the hook's process does not get to run."""
import os
import signal
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
    p = probe(["init", "launch", "L", "1000", "sync", "launch", "L", "1000", "sync", "gate",
               "end"])
    fields, _ = p.expect("gate")
    assert fields[1] == "2", "not ungated"
    assert p.wait() == 0
    (w,) = warnings(p)
    assert "no gpushare broker" in w and endpoint in w and "warn" in w
    # decided on seeing no socket, not after a deadline for a welcome
    assert "(no socket file)" in w, w
    assert len(kernels(sim)) == 2


def test_silent_broker_fails_open_within_a_moment(fake_brokers, probe, sim, endpoint):
    # The first launch waits for the first attempt's welcome only: it is
    # through, ungated, before the hook tries the broker again (its next
    # hello, on a timer of its own).
    b = fake_brokers(endpoint, welcome=False)
    p = probe(["init", "launch", "L", "1000", "kfirst", "sync", "gate", "wait", "end"])
    _, t_launched = p.expect("launched kfirst CUDA_SUCCESS")
    fields, _ = p.expect("gate")
    assert fields[1] == "2", "not ungated"
    first = b.wait_for("hello")
    second = b.wait_for("hello", since=first["t"])
    assert t_launched < second["t"], "a silent broker held the launch up past the next attempt"
    p.go()
    assert p.wait() == 0
    (w,) = warnings(p)
    assert "no welcome" in w


def test_broker_appearing_later_is_joined(fake_brokers, probe, sim, endpoint):
    p = probe(["init", "launch", "L", "1000", "sync", "wait", "launch", "L", "1000", "klater",
               "sync", "end"])
    p.expect("wait")
    b = fake_brokers(endpoint)
    b.wait_for("hello")
    b.wait_for("join")
    p.go()
    acq = b.wait_for("acquire")
    g = b.grant(acq)
    _, t = p.expect("launched klater CUDA_SUCCESS")
    assert t >= g["t"], "gated again, yet the launch did not wait for the grant"
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
    b2.wait_for("join")
    p.go()
    acq = b2.wait_for("acquire")
    b2.grant(acq)
    p.expect("launched kback CUDA_SUCCESS")
    assert p.wait() == 0
    assert len(warnings(p)) == 1, p.stderr()


def test_shutdown_revoke_releases_at_once_and_fails_open(fake_brokers, probe, sim, endpoint):
    # klong runs for 20 s (the probe exits without waiting for it): a
    # release that came while it ran did not wait for the drain.
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "20000000", "klong", "wait", "end"])
    p.expect("wait")
    grant = b.messages("grant", direction="out")[0]
    b.revoke(grant, reason="shutdown")
    rel = b.wait_for("release")
    assert rel["msg"]["reason"] == "revoked"
    # the simulated driver logs a kernel when it ends
    assert not kernels(sim, "klong"), "waited for the GPU for a broker that is going away"
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
    fields, _ = p.expect("forked cuda")
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
    p.expect("forked cuda")  # whatever CUDA says in the child, it returns
    p.expect("launched kparent CUDA_SUCCESS")
    assert p.wait() == 0


def test_child_does_not_keep_the_parents_connection(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "fork", "linger", "end"])
    fields, _ = p.expect("forked linger")
    # The child sleeps 3 s and exits.  Once it is in that sleep (all the
    # hook does at fork is done), it is stopped: it lives until the test
    # ends, so the connection can close only because the parent exited.
    pid = int(fields[-1].split("=")[1])
    child = os.pidfd_open(pid)
    try:
        gstest.wait_until(lambda: "nanosleep" in open("/proc/%d/wchan" % pid).read(),
                          what="the child's sleep")
        signal.pidfd_send_signal(child, signal.SIGSTOP)
        assert p.wait() == 0
        b.wait_for("_disconnected", direction="event")
    finally:
        signal.pidfd_send_signal(child, signal.SIGKILL)
        os.close(child)


# ---- exit ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["exit", "end"])
def test_exit_while_waiting_for_the_gpu(fake_brokers, probe, sim, endpoint, how):
    # A thread waits for a grant that never comes; the program ends: it
    # exits within one of the hook's heartbeat intervals (its exit path has
    # short deadlines of its own), and the broker sees the connection go.
    b = fake_brokers(endpoint)
    p = probe(["init", "bg_launch", "1000", "wait", how])
    b.wait_for("acquire")
    p.expect("wait")
    n, t_go = b.count(), time.monotonic_ns()  # the fake broker's clock
    p.go()
    assert p.wait() == 0
    gone = b.wait_for("_disconnected", after=n, direction="event")
    beats = b.heartbeats_between(t_go, gone["t"])
    assert len(beats) <= 1, "the hook ran on for %d heartbeats after the end" % len(beats)
    assert not kernels(sim)


def test_exit_releases_the_grant(fake_brokers, probe, sim, endpoint):
    b = fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "end"])
    assert p.wait() == 0
    rel = b.wait_for("release")
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
    wait_stderr(p, "waiting for")
    b.grant()
    p.expect("threads done")
    assert p.wait() == 0
    lines = [line for line in warnings(p) if "waiting for" in line]
    assert len(lines) == 1, p.stderr()
    if info:
        assert info in lines[0]
    else:
        assert "waiting for the GPU (held by another notebook)" in lines[0]


def test_wait_state_says_who_holds_the_gpu(fake_brokers, probe, sim, endpoint):
    """gpushare_hook_wait_state (the notebook's wait line reads it): a
    thread waiting for a grant is a wait on its GPU, with the holder and
    the end of its slice from the broker's answer; once granted, the wait
    is over and counted."""
    b = fake_brokers(endpoint)
    b.ack_info = "held by alice's notebook a.ipynb for at most 30.0 s"
    b.ack_extra = {"holder": "alice's notebook a.ipynb", "left_ms": 30000}
    p = probe(["waitwatch", "init", "launch", "L", "1000", "sync", "wait", "end"])
    st = gstest.wait_states(p, lambda s: s["devices"] and "holder" in s["devices"][0])
    (d,) = st["devices"]
    assert st["waiting"] and st["broker"] and not st["quiet"]
    assert (d["gpu"], d["state"], d["holder"]) == (0, "gpu", "alice's notebook a.ipynb")
    assert d["info"] == b.ack_info and 0 < d["left_s"] <= 30 and d["for_s"] >= 0
    assert d["uuid"] == b.messages("join")[0]["msg"]["devices"][0]
    assert d["waits"] == 0
    b.grant()
    st = gstest.wait_states(p, lambda s: s["devices"] and s["devices"][0]["waits"] == 1)
    assert not st["waiting"] and st["devices"][0]["state"] == "none"
    assert "for_s" not in st["devices"][0] and st["devices"][0]["waited_s"] > 0
    p.expect("sync")
    p.go()
    assert p.wait() == 0


def test_wait_notices_off_in_this_process_only(fake_brokers, probe, sim, endpoint):
    """gpushare_hook_wait_notices(0) (the notebook's wait line says it)
    silences the process's own notice, not a forked child's: the kernel's
    line shows only the kernel's waits."""
    b = fake_brokers(endpoint)
    p = probe(["notices", "0", "notices", "0", "fork", "cuda", "init", "launch", "L", "1000",
               "kparent", "sync", "end"])
    assert p.expect("notices")[0] == ["notices", "1"]  # on until then
    assert p.expect("notices")[0] == ["notices", "0"]
    wait_stderr(p, "waiting for")  # the child's, after its wait passed a second
    b.grant()
    assert p.expect("forked cuda")[0][-1] == "status=0"
    parent = b.wait_for("acquire", since=b.messages("acquire")[0]["t"])
    # The parent waits in turn: a second and more goes by on its own clock
    # (three heartbeats), and no notice of its own comes.
    b.wait_heartbeats(3, parent["t"])
    lines = [line for line in warnings(p) if "waiting for" in line]
    assert len(lines) == 1 and "[%d]" % p.pid not in lines[0], p.stderr()
    b.grant(parent)
    p.expect("launched kparent CUDA_SUCCESS")
    assert p.wait() == 0


def test_nothing_on_stdout(fake_brokers, probe, sim, endpoint):
    fake_brokers(endpoint, auto_grant=True)
    p = probe(["init", "launch", "L", "1000", "sync", "end"], GPUSHARE_LOG="debug")
    assert p.wait() == 0
    assert all(line is None or " t=" in line for line in p.lines), p.lines
    assert "debug" in p.stderr()


def test_hanging_broker_is_noticed_by_heartbeats(probe, sim, endpoint, tmp_path):
    # The broker process stops (SIGSTOP): its socket stays open, only the
    # ZMTP heartbeats go unanswered.  The hook must notice and fail open.
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
        wait_stderr(p, "lost the gpushare broker")
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


# ---- fencing: a broker that dropped this process ------------------------------


def test_a_dropped_hook_drains_joins_again_and_refuses_old_grants(fake_brokers, probe, sim,
                                                                   endpoint):
    """The broker answers a heartbeat of a membership (epoch) it no longer
    has with unknown_client (it dropped the hook, say while its process was
    stopped).  The hook closes its gate, drains, joins again without
    releasing what the broker has forgotten, refuses a grant of the old
    membership still on its way, and runs only under a new one."""
    b = fake_brokers(endpoint, epochs=True, heartbeat_ms=50)
    p = probe(["init", "launch", "L", "1000", "k1", "sync", "wait",
               "launch", "L", "1000", "k2", "sync", "end"])
    acq = b.wait_for("acquire")
    old = b.grant(acq)
    assert old["msg"]["epoch"] == 1
    p.expect("wait")
    hb = b.wait_for("heartbeat", after=b.count(), pred=lambda m: m.get("epoch") == 1)
    n = b.count()
    b.send(hb["ident"], {"v": 1, "type": "error", "seq": hb["msg"]["seq"],
                         "code": "unknown_client", "request_type": "heartbeat",
                         "message": "this broker no longer knows this client"})
    join = b.wait_for("join", after=n)
    b.grant(acq, epoch=1)  # the old membership's, after the new join on the same connection
    p.go()  # k2 needs the GPU: the gate is closed
    acq2 = b.wait_for("acquire", after=n)
    new = b.grant(acq2)
    assert new["msg"]["epoch"] == 2
    _, t = p.expect("launched k2 CUDA_SUCCESS")
    assert t > new["t"], "k2 ran under a grant of the old membership"
    assert p.wait() == 0
    assert not [r for r in b.messages("release", after=n)
                if r["msg"]["grant_id"] == old["msg"]["grant_id"] and r["t"] > join["t"]], \
        "released a grant the broker had forgotten"
    assert "the broker answered heartbeat with unknown_client" in p.stderr()
    assert "the GPU grant is gone: draining and joining the gpushare broker again" in p.stderr()


def test_a_grant_of_before_the_join_is_refused(fake_brokers, probe, sim, endpoint):
    """Epochs are checked from the first join on: a grant naming another
    membership never opens the gate."""
    b = fake_brokers(endpoint, epochs=True, heartbeat_ms=50)
    p = probe(["init", "launch", "L", "1000", "k1", "sync", "end"])
    acq = b.wait_for("acquire")
    wrong = b.grant(acq, epoch=7)
    # Two rounds of the hook's I/O thread later (its heartbeats) it has
    # read the wrong grant; had it taken it, k1 would have run by then.
    b.wait_heartbeats(2, since=wrong["t"])
    assert not p.printed("launched k1")
    right = b.grant(acq)
    _, t = p.expect("launched k1 CUDA_SUCCESS")
    assert t > right["t"]
    assert p.wait() == 0
