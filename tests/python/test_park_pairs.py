"""Two jobs whose memory does not fit together (issue 17), end to end on the
simulated GPU: the real broker and hooks, the swap tier, notebooks driven
by a fake launcher.  Each job runs, in one cell, GPU phases that read its
working set and CPU phases; the broker time-slices them by parking, and
both finish with their data intact at every GPU phase and at the end.  The
event log shows how: every switch took a notebook that held nothing (its
GPU phase was over, or its turn was), priced with the switch cost the
broker measured."""
import pytest

import gstest
from gstest import MIB, entry

CHUNK = 4 * MIB


def pinned(b):
    pools = b.status()["parking"].get("pool") or [{}]
    return pools[0].get("pinned_bytes", 0)


def two_jobs(notebooks):
    """(broker, [a, b]): two notebooks of 60 MiB each, written with seeds 1
    and 2, on a GPU of 100 MiB (b's allocation parked a), on the swap
    tier."""
    b, sim, make = notebooks("100M", "park_idle_s=0", GPUSHARE_POOL_CHUNK=str(CHUNK))
    # Segments of 4 MiB (1 GiB on a real GPU, against 4-32 GiB working
    # sets): a switch can move part of a working set.
    nbs = [make(n, GPUSHARE_SWAP="on", GPUSHARE_SWAP_SEGMENT="4M") for n in ("a", "b")]
    for seed, nb in enumerate(nbs, 1):
        assert nb.cell("alloc x %d" % (60 * MIB)) == "ok", nb.stderr()
        assert nb.cell("fill x %d" % seed) == "ok"
    # The pool pins for both: the one parked and the one that goes out at
    # the next switch, while the other's lease is still out (it stayed at
    # one footprint, on the H200 too).
    gstest.wait_until(lambda: pinned(b) >= 120 * MIB, timeout=20, interval=0.05,
                      what="the pool to pin 120 MiB (both working sets)")
    return b, nbs


@pytest.mark.parametrize("gpu_ms,cpu_ms", [(200, 300), (300, 50)])
def test_two_jobs_that_do_not_fit_both_finish_with_their_data(notebooks, short_tmp, gpu_ms,
                                                              cpu_ms):
    b, nbs = two_jobs(notebooks)
    launcher = nbs[0].launcher
    for nb in nbs:
        launcher.cell(nb.session, "busy", "job")
    for seed, nb in enumerate(nbs, 1):
        nb.send("job x 4 %d %d %d" % (gpu_ms, cpu_ms, seed))
    for nb in nbs:
        assert nb.answer(120) == "ok", "its data changed during the job: %s" % nb.stderr()
    for nb in nbs:
        launcher.cell(nb.session, "idle", "job")
    for seed, nb in enumerate(nbs, 1):
        assert nb.cell("check x %d" % seed) == "ok", nb.stderr()

    ev = b.synced_events()
    parks = [e for e in ev if e["event"] == "park"]
    assert {p["session"] for p in parks} == {"a", "b"}, parks  # both went out ...
    # ... and no turn was taken for nothing: a notebook brought back ran (was
    # granted the GPU) before it went out again.  (Taking turns being brought
    # back without running, a resident waiter queued behind a parked one,
    # made the jobs' 1.4 to 2 s of work take 98 s.)
    # (At most one such turn: on a loaded 2-core machine a cell's first
    # acquire can come after the other's demand once; the fault took every
    # turn for nothing.)
    for nb in nbs:
        mine = [e["event"] for e in ev if e.get("session") == nb.name
                and e["event"] in ("unpark", "grant", "park")]
        wasted = [i for i, what in enumerate(mine) if what == "unpark" and "park" in mine[i + 1:]
                  and "grant" not in mine[i + 1:mine.index("park", i + 1)]]
        assert len(wasted) <= 1, (nb.name, mine)
    # Every park after the first (the pool was empty then) is a swap: the
    # pool grows by what fell to the checkpoint tier for lack of room, and
    # a park right after a swap-in knows what it brought back.  (Before:
    # one swap and one checkpoint every turn, 2.4 s each on the H200.)
    tiers = [(p["session"], p["tier"]) for p in parks]
    assert all(t == "swap" for _, t in tiers[1:]), (tiers, b.log()[-3000:])
    # A switch moves only what the room lacks (a partial park): the one
    # coming back needs 60 MiB where 40 MiB are free, so the one going out
    # moves about 20 MiB, not its 60 (whole segments: a little more).
    # Only the first park, for b's allocation, moved all of a, and the
    # second, which made room for a whole a.
    sizes = [(p["session"], p["bytes"] // MIB) for p in parks]
    assert len(parks) > 2 and all(p["bytes"] < 48 * MIB for p in parks[2:]), sizes
    # Nothing failed, except (rarely, under load: once in a CI distcheck) a
    # swap_out the hook refused because it held the GPU again, which the
    # broker rolls back and retries, and the unpark that waited for that
    # memory: each must be followed by its session's successful retry.
    failed = [e for e in ev if e["event"] in ("park_failed", "unpark_failed")]
    for f in failed:
        assert ("still holds the GPU" in f.get("error", "") or
                f["event"] == "unpark_failed"), (failed, b.log()[-3000:])
        retry = "park" if f["event"] == "park_failed" else "unpark"
        assert any(e["event"] == retry and e["session"] == f["session"] and e["ts"] > f["ts"]
                   for e in ev), (f, b.log()[-3000:])
    assert len(failed) <= 2, (failed, b.log()[-3000:])
    st = b.status()
    # The one parked now (its check ran first) is parked in part: status
    # shows both halves.
    out = [entry(st, nb.name) for nb in nbs if entry(st, nb.name)["state"] == "parked"]
    assert len(out) == 1, st["sessions"]
    assert 0 < out[0]["parked_bytes"] < 48 * MIB, out
    assert out[0]["resident_bytes"] + out[0]["parked_bytes"] == 60 * MIB, out
    for nb in nbs:
        e = entry(st, nb.name)
        assert e["unparks"] >= 1 and e["park_error"] is None, e  # ... and came back
        assert e["switch_cost_s"] > 0, e  # priced with the rates measured
    assert st["gpus"][0]["swap_park_gbps"] > 0 and st["gpus"][0]["swap_unpark_gbps"] > 0
    # A running job is parked only once it holds nothing (its GPU phase
    # over and its grant given back, or its turn over and taken back): no
    # park ever had to revoke a job's grant.
    assert not [e for e in ev if e["event"] == "revoke" and e["reason"] == "park"], \
        [e for e in ev if e["event"] == "revoke"]


def test_cells_started_together_do_not_switch_out_the_resident_one(notebooks, short_tmp):
    """Two cells that start at the same moment, one on a parked notebook and
    one on the resident notebook whose memory it needs, the parked one's
    cell event first.  The resident one is not parked before its own cell
    event has come (it would go out as its cell begins and come back after
    the other: on the H200 both 32 GiB adaptive pairs began with such a
    switch, 0.8 s each way for nothing): an unpark for a cell that has just
    started waits 20 ms before it makes room (park_poll.c), and by then the
    resident one's cell runs, which keeps its memory for its switch cost."""
    b, nbs = two_jobs(notebooks)
    # One cell on each in turn (a comes back, b goes out, then the other
    # way round), so that the broker knows b's switch cost: until then a
    # cell that has just started has none to keep its memory for.
    for seed, nb in enumerate(nbs, 1):
        assert nb.cell("check x %d" % seed) == "ok", nb.stderr()
    gstest.wait_until(lambda: entry(b.status(), "b")["switch_cost_s"] > 0, timeout=20,
                      interval=0.05, what="b's switch cost to be measured")
    assert entry(b.status(), "a")["state"] == "parked"
    launcher = nbs[0].launcher
    for nb in nbs:  # a (parked) first, b (resident) right after
        launcher.cell(nb.session, "busy", "job")
    for seed, nb in enumerate(nbs, 1):
        nb.send("job x 2 20 20 %d" % seed)
    for nb in nbs:
        assert nb.answer(120) == "ok", "its data changed during the job: %s" % nb.stderr()
    for nb in nbs:
        launcher.cell(nb.session, "idle", "job")
    ev = b.synced_events()
    start = next(i for i, e in enumerate(ev) if e["event"] == "cell" and e["state"] == "busy"
                 and e["msg_id"] == "job")
    after = ev[start:]
    b_cell = next(i for i, e in enumerate(after) if e["event"] == "cell" and e["session"] == "b")
    b_parks = [(i, e) for i, e in enumerate(after)
               if e["event"] == "park_start" and e["session"] == "b"]
    # Parked at all, then as a running cell (its protection over, or its
    # GPU idle longer than a switch), never as the idle notebook it was
    # for the moment between the two cell events.
    for i, e in b_parks:
        assert i > b_cell and "its cell runs" in e["why"], after
    # Both cells ran.  (Which first depends on the machine's load: a
    # resident cell that has not asked for the GPU within its switch cost
    # is switched out as a running cell, rightly.)
    assert {"a", "b"} <= {e["session"] for e in after if e["event"] == "grant"}, after


def test_a_partial_park_leaves_room_for_what_the_one_coming_back_held(notebooks, short_tmp):
    """A switch moves only what the session coming back lacks, plus what it
    has held beyond its working set (its processes' peaks): a notebook that
    allocated a temporary once, back from a switch, allocates it again
    without anyone else being parked.  (On the H200 a 56 GiB notebook back
    from a switch could not allocate 1 GiB to check its data: only the
    margin was free, the partly parked one's remainder cannot be parked
    later, and the third notebook exceeded the host budget.)"""
    b, nbs = two_jobs(notebooks)
    a, bb = nbs
    # a (parked by b's allocation, then back) holds a temporary of 12 MiB
    # once: its peak is 72 MiB.
    assert a.cell("check x 1") == "ok", a.stderr()
    assert a.cell("alloc t %d" % (12 * MIB)) == "ok", a.stderr()
    assert a.cell("free t") == "ok"
    # b comes back (a goes out in part), then a again (b goes out in part,
    # leaving 12 MiB more than a's 60 MiB need).
    assert bb.cell("check x 2") == "ok", bb.stderr()
    assert entry(b.status(), "a")["state"] == "parked"
    assert a.cell("check x 1") == "ok", a.stderr()
    parks_before = len([e for e in b.synced_events() if e["event"] == "park_start"])
    assert a.cell("alloc t %d" % (12 * MIB)) == "ok", a.stderr()
    ev = b.synced_events()
    assert len([e for e in ev if e["event"] == "park_start"]) == parks_before, ev[-10:]
    last_b = [e for e in ev if e["event"] == "park" and e["session"] == "b"][-1]
    assert last_b["bytes"] < 60 * MIB, last_b  # in part
    assert a.cell("free t") == "ok"
    assert a.cell("check x 1") == "ok" and bb.cell("check x 2") == "ok"


def test_a_session_parked_in_part_gives_its_remainder_to_an_allocation(notebooks, short_tmp):
    """A session parked in part by a switch is a victim again for what it
    still holds: an allocation that does not fit beside it parks the rest
    into the same lease, and both notebooks keep their data.  (Before, its
    remainder could not be taken: the allocation failed, and on the H200 a
    notebook died of OOM.)"""
    b, nbs = two_jobs(notebooks)
    a, bb = nbs
    # Switches until b is out in part (the first park, for b's allocation,
    # may have gone to the checkpoint tier: a switch back from there moves
    # all).
    for _ in range(3):
        assert a.cell("check x 1") == "ok", a.stderr()
        st = entry(b.status(), "b")
        if st["state"] == "parked" and st["resident_bytes"] > 0:
            break
        assert bb.cell("check x 2") == "ok", bb.stderr()
    st = entry(b.status(), "b")
    assert st["state"] == "parked" and st["resident_bytes"] > 16 * MIB, st
    # 24 MiB more for a: more than is free beside b's remainder.
    assert a.cell("alloc t %d" % (24 * MIB)) == "ok", a.stderr()
    st = entry(b.status(), "b")
    assert st["state"] == "parked" and st["resident_bytes"] == 0, st
    assert st["parked_bytes"] == 60 * MIB, st
    ev = b.synced_events()
    last = [e for e in ev if e["event"] == "park" and e["session"] == "b"][-1]
    assert last["tier"] == "swap", last
    assert not [e for e in ev if e["event"] in ("park_failed", "unpark_failed")], ev[-10:]
    assert a.cell("fill t 7") == "ok" and a.cell("check t 7") == "ok"
    assert a.cell("free t") == "ok"
    # b comes back whole, with its data.
    assert bb.cell("check x 2") == "ok", bb.stderr()
    assert a.cell("check x 1") == "ok", a.stderr()
