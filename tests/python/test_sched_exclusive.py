"""The exclusive policy end to end: the real broker, the real hook in
several processes, the simulated GPU (which could run their kernels side
by side: GPUSHARE_SIM_CONCURRENCY=4).  Kernels of two processes never
overlap and alternate by quantum; a notebook whose cell finishes hands the
GPU over at once."""

import pytest

from gstest import Client, configure, kernels, overlaps, runs, session_of, wait_until


pytestmark = [pytest.mark.sim(concurrency=4), pytest.mark.broker("--policy", "exclusive")]


def test_kernels_never_overlap_and_alternate_by_quantum(broker, sim, workers):
    configure(broker.endpoint, tq=0.2)
    a = workers("a")
    a.expect("first")
    b = workers("b")
    # Both ran, and the GPU changed hands at least five times.
    wait_until(lambda: len(runs(kernels(sim))) >= 6, timeout=20, what="six turns")
    a.kill()
    b.kill()
    ks = kernels(sim)
    assert not overlaps(ks), "kernels of both processes ran at once"
    turns = runs(ks)
    assert {t[0] for t in turns} == {a.pid, b.pid}
    # Every turn but the first and the last lasted about one quantum (200 ms;
    # the 2 ms kernel in flight at the revoke finishes first).
    for pid, start, end, n in turns[1:-1]:
        assert 150e6 <= end - start <= 320e6, "a turn of %.0f ms" % ((end - start) / 1e6)
    st = broker.status()
    assert st["policy"] == "exclusive" and st["config"]["tq_s"] == 0.2


def test_cell_idle_hands_the_gpu_over_within_10ms(broker, sim, workers):
    launcher = Client(broker.endpoint)
    try:
        a = workers("a", GPUSHARE_SESSION="nb-a")
        session = launcher.register("nb-a", a.pid)
        launcher.cell(session, "busy")
        a.expect("first")
        # One hand-back first: a hook's first drain also sets up its
        # membarrier (~10-20 ms on some kernels); measure the steady state.
        launcher.cell(session, "idle")
        wait_until(lambda: session_of(broker.status(), a.pid)["revokes"] == 1, what="warm-up")
        launcher.cell(session, "busy")
        b = workers("b")
        wait_until(lambda: broker.status()["gpus"][0]["waiting"], what="b waiting")
        assert not kernels(sim, pid=b.pid), "b ran while a's cell held the GPU (tq is 20 s)"
        launcher.cell(session, "idle")
        wait_until(lambda: kernels(sim, pid=b.pid), what="b's first kernel")
        a_last = max(k["end_ns"] for k in kernels(sim, pid=a.pid)
                     if k["start_ns"] < kernels(sim, pid=b.pid)[0]["start_ns"])
        b_first = kernels(sim, pid=b.pid)[0]["start_ns"]
        assert 0 <= b_first - a_last < 10e6, "hand-over took %.1f ms" % (
            (b_first - a_last) / 1e6)
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
        a = workers("a", GPUSHARE_SESSION="nb-a")
        session = launcher.register("nb-a", a.pid)
        launcher.cell(session, "busy")
        a.expect("first")
        b = workers("b")
        line = wait_until(lambda: re.search(r"waiting for GPU 0 \((.*)\)", b.stderr()),
                          timeout=20, what="b's waiting line")
        m = re.fullmatch(r"held by tester's notebook nb-a\.ipynb for at most (\d+\.\d) s",
                         line.group(1))
        assert m and 0 < float(m.group(1)) <= 20.0, line.group(0)
        assert b.stderr().count("waiting for") == 1, b.stderr()
        launcher.cell(session, "idle")
        wait_until(lambda: kernels(sim, pid=b.pid), what="b's first kernel")
    finally:
        launcher.close()
