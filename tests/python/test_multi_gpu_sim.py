"""Multi-GPU on a simulated server of eight GPUs (issue 39): what runs on
this machine's CPUs while no machine of four or more GPUs is lent.  Two
GPUs park at the same time, each into its own pool, and everything comes
back bit-exact; a gang of two GPUs runs beside single-GPU sessions spread
over the other six and waits for a single session holding one of its GPUs
without deadlock; a move between two of eight GPUs is in test_move.py."""
import sys
import threading

import pytest

import gstest
from gstest import MIB, entry
from test_placement import TWO, probe

CHUNK = 4 * MIB


def gpu_of(broker, session):
    """The indices of the GPUs where the session holds memory (resident or
    parked), or, without memory, where it is placed."""
    gpus = broker.status()["gpus"]
    mine = [(g["index"], e) for g in gpus for e in g["sessions"] if e["id"] == session]
    held = [i for i, e in mine if e.get("resident_bytes") or e.get("parked_bytes")]
    return held or [i for i, e in mine if e.get("placed")]


def at_once(*calls):
    """Runs the calls on threads at the same time; their results in order."""
    out = [None] * len(calls)

    def run(i):
        out[i] = calls[i]()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts)
    return out


def test_two_gpus_park_at_once_each_into_its_own_pool(notebooks, short_tmp):
    """On GPUs 3 and 6 of eight (a spawner's choice, kept as it is), a
    notebook fills 60 MiB of the 100 MiB and goes idle, another holds 20
    MiB; both others then ask for 30 MiB at the same time: each GPU parks
    its idle notebook into its own pool, and both come back bit-exact when
    their cells start, again at the same time."""
    broker, sim, make = notebooks("100M", "park_idle_s=0", GPUSHARE_SIM_DEVICES="8",
                                  GPUSHARE_POOL_CHUNK=str(CHUNK))
    uuids = [g["uuid"] for g in broker.status()["gpus"]]
    assert len(uuids) == 8
    nb = {}
    for name, gpu in (("a", 3), ("c", 3), ("b", 6), ("d", 6)):
        nb[name] = make(name, GPUSHARE_SWAP="on", CUDA_VISIBLE_DEVICES=uuids[gpu])
    for name, seed in (("a", 1), ("b", 2)):
        assert nb[name].cell("alloc x %d" % (60 * MIB)) == "ok", nb[name].stderr()
        assert nb[name].cell("fill x %d" % seed) == "ok"
    for name in "cd":
        assert nb[name].cell("alloc y %d" % (20 * MIB)) == "ok", nb[name].stderr()
    assert [gpu_of(broker, s) for s in "acbd"] == [[3], [3], [6], [6]]

    def pools():
        return {p.get("gpu", i): p for i, p in enumerate(broker.status()["parking"]["pool"])}
    gstest.wait_until(lambda: pools()[3]["pinned_bytes"] >= 60 * MIB and
                      pools()[6]["pinned_bytes"] >= 60 * MIB,
                      what="GPUs 3 and 6's pools pinning 60 MiB each", interval=0.05)
    assert at_once(lambda: nb["c"].cell("alloc z %d" % (30 * MIB)),
                   lambda: nb["d"].cell("alloc z %d" % (30 * MIB))) == ["ok", "ok"]
    st = broker.status()
    for name in "ab":
        e = entry(st, name)
        assert e["parking"] == "parked" and e["park_tier"] == "swap", e
    p = pools()
    assert p[3]["lent_bytes"] >= 60 * MIB and p[6]["lent_bytes"] >= 60 * MIB, p
    assert all(p[g]["lent_bytes"] == 0 for g in p if g not in (3, 6)), p
    parks = {e["session"]: e for e in broker.events("park")}
    assert parks["a"]["tier"] == parks["b"]["tier"] == "swap", parks
    # Both come back at the same time, each on its own GPU, bit-exact.
    assert at_once(lambda: nb["a"].cell("check x 1"),
                   lambda: nb["b"].cell("check x 2")) == ["ok", "ok"]
    assert gpu_of(broker, "a") == [3] and gpu_of(broker, "b") == [6]
    for name in "cd":
        assert nb[name].cell("run 1") == "ok", nb[name].stderr()


@pytest.mark.sim(extra={"GPUSHARE_SIM_DEVICES": "8"})
def test_a_gang_runs_beside_single_gpu_sessions_on_eight_gpus(broker, sim, tmp_path):
    """Six single-GPU sessions spread over GPUs 0-5; a gang of two is
    placed on the two left (6, 7) and holds them together; a single
    session its user put on GPU 6 holds it first (exclusive, no idle
    release): the gang waits for both GPUs, holding neither, and runs when
    it is done; nobody else waits."""
    broker.configure(policy="exclusive", tq=600)
    uuids = [g["uuid"] for g in broker.status()["gpus"]]
    singles = ["s%d" % i for i in range(6)]
    placed = {s: [uuids.index(u) for u in probe(broker, sim, s)["uuids"]]
              for s in singles}
    assert sorted(g for gs in placed.values() for g in gs) == list(range(6)), placed

    def start(session, gpus, first, **env):
        e = gstest.hook_env(sim, broker.endpoint, GPUSHARE_SESSION=session,
                            GPUSHARE_IDLE_RELEASE_MS="0", **env)
        if gpus:
            e["GPUSHARE_GPUS"] = str(gpus)
        return gstest.Proc([sys.executable, "-c", TWO, str(first)], e, tmp_path, session)

    holder = start("holder", None, 0, CUDA_VISIBLE_DEVICES="%s,%s" % (uuids[6], uuids[7]))
    holder.expect("holding")
    gang = start("gang", 2, 0)
    gstest.wait_until(lambda: sorted(gpu_of(broker, "gang")) == [6, 7],
                      what="the gang placed on GPUs 6 and 7")
    entries = [e for g in broker.status()["gpus"] for e in g["sessions"] if e["id"] == "gang"]
    assert len(entries) == 2 and all(e.get("gang") is True for e in entries), entries

    def holders():
        return {g["index"]: g["holders"] for g in broker.status()["gpus"]}
    gstest.wait_until(lambda: all("gang" in g["waiting"] for g in broker.status()["gpus"]
                                  if g["index"] in (6, 7)),
                      what="the gang waiting for GPUs 6 and 7")
    assert "gang" not in sum(holders().values(), []), holders()
    holder.send("go")
    holder.expect("done")
    assert holder.wait() == 0, holder.stderr()
    gang.expect("holding")
    assert holders()[6] == holders()[7] == ["gang"], holders()
    gang.send("go")
    gang.expect("done")
    assert gang.wait() == 0, gang.stderr()
    # A single session's next process finds its GPU where it was.
    assert [uuids.index(u) for u in probe(broker, sim, "s3")["uuids"]] == placed["s3"]
