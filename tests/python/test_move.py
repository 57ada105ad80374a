"""A notebook parked in the deep tier comes back on another GPU when its own
is crowded and another has room (issue 18): the broker restores it with the
driver's GPU pairs (the simulated driver honours them as the 580 driver
did on two H200s: every GPU named once as old and once as new), tells its
hook, which names the device by the new UUID and joins again, and places
the session there from then on.  Where the driver refuses, the notebook
comes back where it was and says why."""
import pytest

from gstest import MIB, inject, wait_until

SIZE = 60 * MIB


def where(broker, session):
    """The indices of the GPUs whose status lists the session."""
    return [g["index"] for g in broker.status()["gpus"]
            if any(e["id"] == session for e in g["sessions"])]


def crowded(notebooks, gpus=2):
    """Simulated GPUs of 100 MiB, pack: a fills 60 MiB of GPU 0 and goes
    idle, b (also placed on GPU 0) takes 60 MiB there, which parks a on the
    checkpoint tier (park_swap=off: moves are the checkpoint tier's, and
    the pool pins ahead for the swap tier); the other GPUs are empty."""
    broker, sim, make = notebooks("100M", "park_idle_s=0", "placement=pack", "park_swap=off",
                                  GPUSHARE_SIM_DEVICES=str(gpus))
    a = make("a")
    assert a.cell("alloc x %d" % SIZE) == "ok", a.stderr()
    assert a.cell("fill x 1") == "ok"
    b = make("b")
    assert b.cell("alloc y %d" % SIZE) == "ok", b.stderr()
    assert b.cell("fill y 2") == "ok"
    assert where(broker, "a") == [0] and where(broker, "b") == [0]
    parked = [e for e in broker.events("park") if e["session"] == "a"]
    assert parked and parked[-1]["tier"] == "checkpoint", parked
    return broker, sim, a, b


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_a_parked_notebook_comes_back_on_the_gpu_with_room(notebooks, short_tmp, gpus):
    """With four (eight) GPUs the pairs are the swap 0 <-> 1 and GPUs 2 and
    3 (to 7) onto themselves (every GPU of the machine, as the driver
    wants): the pair form of a move on a bigger server (issue 39)."""
    broker, sim, a, b = crowded(notebooks, gpus)
    gpus = [g["uuid"] for g in broker.status()["gpus"]]
    # a's cell starts: GPU 0 has no room for it, GPU 1 has; b stays.
    assert a.cell("check x 1") == "ok", a.stderr()
    moved = broker.events("moved")
    assert len(moved) == 1 and moved[0]["session"] == "a", moved
    assert moved[0]["from"] == gpus[0] and moved[0]["to"] == gpus[1]
    assert moved[0]["bytes"] == SIZE
    # Its hook joined again with the new UUID: status shows it on GPU 1
    # with its memory there, and it runs kernels there.
    assert a.cell("run 3") == "ok"
    wait_until(lambda: where(broker, "a") == [1], what="a listed on GPU 1 only")
    e = next(s for s in broker.status()["gpus"][1]["sessions"] if s["id"] == "a")
    assert e["resident_bytes"] == SIZE and e["placed"] is True and e["moves"] == 1, e
    text = broker.cli("status").stdout
    assert "moved to this GPU from another (1 move)" in text, text
    assert b.cell("check y 2") == "ok" and where(broker, "b") == [0]  # b never moved
    assert not [x for x in broker.events("park") if x["session"] == "b"]
    # The session's later processes are placed where it runs now.
    place = [x for x in broker.events("placed") if x["session"] == "a"]
    assert len(place) == 1  # placed once; the move is a "moved" event
    assert a.cell("check x 1") == "ok"


def test_where_the_driver_refuses_it_comes_back_where_it_was(notebooks, short_tmp):
    broker, sim, a, b = crowded(notebooks)
    inject(sim, "restore")  # the restore with GPU pairs fails
    # a comes back on GPU 0 (b is parked for it), its memory intact.
    assert a.cell("check x 1") == "ok", a.stderr()
    refused = broker.events("move_refused")
    assert len(refused) == 1 and refused[0]["session"] == "a", refused
    assert "cuCheckpointProcessRestore" in refused[0]["error"]
    assert not broker.events("moved")
    e = next(s for s in broker.status()["gpus"][0]["sessions"] if s["id"] == "a")
    assert e["move_refused"].startswith(
        "stays on GPU 0: the driver refused to restore it onto GPU 1"), e
    assert where(broker, "a") == [0]
    assert b.cell("check y 2") == "ok"
