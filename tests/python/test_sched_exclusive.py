"""The exclusive policy end to end: the real broker, the real hook in
several processes, the simulated GPU (which could run their kernels side
by side: GPUSHARE_SIM_CONCURRENCY=4).  Kernels of two processes never
overlap and alternate by quantum; a notebook whose cell finishes hands the
GPU over at once: the cell's end, not a timer, takes the grant back.

Why the GPU changed hands is read from the broker's event log (revoke
reasons, each grant's quantum, the order of cell, revoke, release and
grant), what ran from the simulated driver's log; no test measures how
fast a hand-over is (bench/eval does, on a GPU)."""

import os
import pwd

import pytest

from gstest import Client, configure, kernels, overlaps, runs, session_of, turns, wait_until


pytestmark = [pytest.mark.sim(concurrency=4), pytest.mark.broker("--policy", "exclusive")]


def test_kernels_never_overlap_and_alternate_by_quantum(broker, sim, workers):
    configure(broker.endpoint, tq=0.2)
    a = workers("a")
    a.expect("first")
    b = workers("b")
    # Both ran, and the GPU changed hands at least five times.
    wait_until(lambda: len(runs(kernels(sim))) >= 6, what="six turns")
    a.kill()
    b.kill()
    ks = kernels(sim)
    assert not overlaps(ks), "kernels of both processes ran at once"
    assert {t[0] for t in runs(ks)} == {a.pid, b.pid}
    st = broker.status()
    assert st["policy"] == "exclusive" and st["config"]["tq_s"] == 0.2
    # Each hand-over was the quantum's end: granted for 200 ms, taken back
    # for "quantum" no sooner (the broker's own clock).
    ended = [(g, r) for g, r, _ in turns(broker.synced_events()) if r]
    assert len(ended) >= 5, ended
    for g, r in ended:
        assert g["quantum_us"] == 200000 and r["reason"] == "quantum", (g, r)
        assert r["ts"] - g["ts"] >= 0.2 - 1e-3, (g, r)


def holding_notebook(workers, launcher):
    """Worker a as notebook nb-a, in a cell, running on the GPU: (a, session)."""
    a = workers("a", GPUSHARE_SESSION="nb-a")
    session = launcher.register("nb-a", a.pid)
    launcher.cell(session, "busy")
    a.expect("first")
    return a, session


def test_cell_idle_hands_the_gpu_over_at_once(broker, sim, workers):
    launcher = Client(broker.endpoint)
    try:
        a, session = holding_notebook(workers, launcher)
        launcher.cell(session, "idle")
        wait_until(lambda: session_of(broker.status(), a.pid)["revokes"] == 1, what="a's revoke")
        launcher.cell(session, "busy")
        b = workers("b")
        wait_until(lambda: broker.status()["gpus"][0]["waiting"], what="b waiting")
        assert not kernels(sim, pid=b.pid), "b ran while a's cell held the GPU (tq is 20 s)"
        n = len(broker.events())
        launcher.cell(session, "idle")
        wait_until(lambda: kernels(sim, pid=b.pid), what="b's first kernel")
        b_first = kernels(sim, pid=b.pid)[0]["start_ns"]
        assert all(k["end_ns"] <= b_first for k in kernels(sim, pid=a.pid)
                   if k["start_ns"] < b_first), "b ran while a still had work on the GPU"
        # The cell's end took the GPU back, a answered the revoke, and the
        # broker gave it to b right then: no quantum (20 s), no idle
        # release of a's hook, nothing else in between.
        chain = [(e["event"], e["session"], e.get("reason") or e.get("state"))
                 for e in broker.synced_events()[n:]
                 if e["event"] in ("cell", "grant", "revoke", "release")]
        b_session = session_of(broker.status(), b.pid)["id"]
        assert chain[:4] == [("cell", session, "idle"), ("revoke", session, "cell_idle"),
                             ("release", session, "revoked"), ("grant", b_session, None)], chain
        s = session_of(broker.status(), a.pid)
        assert s["id"] == session and s["cell"] == "idle" and s["revokes"] == 2
    finally:
        launcher.close()


def test_a_waiting_cell_is_told_who_holds_the_gpu_and_for_how_long(broker, sim, workers):
    """The hook's one line after a second of waiting names the holder (user
    and notebook, from the launcher's register) and the most time left of
    its quantum (tq 20 s), from the broker's reply to acquire."""
    import re
    launcher = Client(broker.endpoint)
    try:
        a, session = holding_notebook(workers, launcher)
        b = workers("b")
        line = wait_until(lambda: re.search(r"waiting for GPU 0 \((.*)\)", b.stderr()),
                          what="b's waiting line")
        # the owner's account from the socket, and the user its launcher claimed
        m = re.fullmatch(r"held by %s's notebook nb-a\.ipynb \(registered as user \"tester\"\) "
                         r"for at most (\d+\.\d) s" % re.escape(pwd.getpwuid(os.getuid()).pw_name),
                         line.group(1))
        assert m and 0 < float(m.group(1)) <= 20.0, line.group(0)
        assert b.stderr().count("waiting for") == 1, b.stderr()
        launcher.cell(session, "idle")
        wait_until(lambda: kernels(sim, pid=b.pid), what="b's first kernel")
    finally:
        launcher.close()
