"""The adaptive policy (the default) end to end with the real hook on the
simulated GPU: notebooks whose memory fits run side by side, and a cell
that just started gets the GPU to itself for a moment (the interactive
boost) even while another notebook trains."""

import pytest

from gstest import Client, configure, kernels, overlaps, session_of, wait_until


pytestmark = [pytest.mark.sim(concurrency=4)]


def test_small_footprints_run_side_by_side(broker, sim, workers):
    assert broker.status()["policy"] == "adaptive"
    a = workers("a", us=5000)
    b = workers("b", us=5000)
    a.expect("first")
    b.expect("first")
    st = broker.status()
    assert len(st["gpus"][0]["holders"]) == 2, st["gpus"][0]
    assert not st["gpus"][0]["waiting"]
    wait_until(lambda: overlaps(kernels(sim)), what="kernels of both at once")


def test_a_new_cell_is_boosted_while_another_notebook_trains(broker, sim, workers):
    configure(broker.endpoint, boost_ms=150)
    launcher = Client(broker.endpoint)
    try:
        train = workers("train", GPUSHARE_SESSION="train")
        # no idle release: only the broker may end its grant (by the cell's end)
        short = workers("short", mode="steps", GPUSHARE_SESSION="short",
                        GPUSHARE_IDLE_RELEASE_MS=0)
        launcher.register("train", train.pid)
        launcher.register("short", short.pid)
        launcher.cell("train", "busy")
        train.expect("first")
        # train's own boost (150 ms of GPU time) runs out; then it just trains.
        wait_until(lambda: not session_of(broker.status(), train.pid)["boosted"] and
                   session_of(broker.status(), train.pid)["gpu_time_s"] > 0.15,
                   what="train's boost to end")
        launcher.cell_synced("short", "busy")  # in the log before short's acquire
        short.send("run 20")
        short.expect("done 20")
        launcher.cell("short", "idle")
        ks = kernels(sim, pid=short.pid)
        assert len(ks) == 20
        # The cell does not wait for train's drain (issue 17: a new cell is
        # granted while the holder it preempts drains, memory permitting):
        # what train had queued may start beside the cell's first kernels,
        # nothing after them.
        start, end = ks[2]["start_ns"], ks[-1]["end_ns"]
        during = [k for k in kernels(sim, pid=train.pid) if start <= k["start_ns"] < end]
        assert not during, "train ran %d kernels inside the boosted cell" % len(during)
        # The cell ran its 20 steps on one grant: train's was taken back, and
        # short's was not taken back (nor given back) until the cell ended.
        ev = broker.synced_events()
        busy = next(i for i, e in enumerate(ev) if e["event"] == "cell" and
                    e["session"] == "short" and e["state"] == "busy")
        idle = next(i for i, e in enumerate(ev) if i > busy and e["event"] == "cell" and
                    e["session"] == "short" and e["state"] == "idle")
        cell = [(e["event"], e["session"]) for e in ev[busy:idle]
                if e["event"] in ("grant", "revoke", "release")]
        assert cell.count(("grant", "short")) == 1, cell
        assert ("revoke", "short") not in cell and ("release", "short") not in cell, cell
        assert ("revoke", "train") in cell, cell  # preempted
        s = session_of(broker.status(), train.pid)
        assert s["revokes"] >= 1
        wait_until(lambda: [k for k in kernels(sim, pid=train.pid) if k["start_ns"] > end],
                   what="train to resume")
    finally:
        launcher.close()
