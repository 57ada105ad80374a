"""The swap tier of parking end to end, on the simulated GPU: the real
broker pins host memory in its pool (small chunks here), and the real hook
(GPUSHARE_SWAP=on) backs the notebooks' allocations so that it can copy
them out into chunks fetched from the pool socket and back in, at the same
addresses.  An idle notebook is parked there when another needs the room,
comes back bit-exact when its cell starts, and brings itself back when the
broker is killed while it is parked."""
import signal
import subprocess

import pytest

import gstest
from gstest import MIB, entry

CHUNK = 4 * MIB


@pytest.fixture
def swap_notebooks(notebooks):
    """start(memory, *settings, **sim_env) -> (broker, make(name, swap="on",
    cells=True)): the notebooks fixture with a host pool that pins
    CHUNK-sized chunks, and notebooks whose hooks swap (or not)."""
    def start(memory, *settings, **sim_extra):
        b, sim, make = notebooks(memory, *settings, GPUSHARE_POOL_CHUNK=str(CHUNK), **sim_extra)

        def make_swap(name, swap="on", cells=True):
            return make(name, cells, GPUSHARE_SWAP=swap)
        return b, make_swap
    return start


def pinned(b):
    pools = b.status()["parking"].get("pool") or [{}]
    return pools[0].get("pinned_bytes", 0)


def wait_for(what, check, timeout=20):
    """The pool pins in the background and says so only in the broker's
    status: polled until check() holds."""
    return gstest.wait_until(check, timeout=timeout, what=what, interval=0.05)


def a_holds_60_mib(b, a, c, seed):
    """a fills 60 MiB with pattern seed and goes idle, c holds 20 MiB, and
    the pool has pinned enough to take a: the next 30 MiB c asks for parks
    a."""
    assert a.cell("alloc x %d" % (60 * MIB)) == "ok", a.stderr()
    assert a.cell("fill x %d" % seed) == "ok"
    assert c.cell("alloc y %d" % (20 * MIB)) == "ok", c.stderr()
    wait_for("the pool to pin 60 MiB", lambda: pinned(b) >= 60 * MIB)


def test_an_idle_notebook_goes_out_and_back_on_the_swap_tier(swap_notebooks, short_tmp):
    b, make = swap_notebooks("100M", "park_idle_s=0")
    st = b.status()["parking"]
    assert st["swap_tier"] == "on", st
    a, c = make("a"), make("c")
    assert a.cell("alloc x %d" % (60 * MIB)) == "ok", a.stderr()
    assert a.cell("fill x 1") == "ok"
    assert c.cell("alloc y %d" % (20 * MIB)) == "ok", c.stderr()
    assert c.cell("fill y 2") == "ok"
    # Two notebooks hold memory: the pool pins ahead for the larger one.
    wait_for("the pool to pin 60 MiB", lambda: pinned(b) >= 60 * MIB)
    # c needs room: a (idle) is parked, by its own hook, into the pool.
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    st = b.status()
    e = entry(st, "a")
    assert e["parking"] == "parked" and e["park_tier"] == "swap", e
    assert e["parked_bytes"] == 60 * MIB and e["resident_bytes"] == 0
    assert st["parking"]["pool"][0]["lent_bytes"] >= 60 * MIB
    parks = b.events("park")
    assert parks and parks[-1]["session"] == "a" and parks[-1]["tier"] == "swap"
    # a's cell brings it back (c, idle, makes room), bit-exact.
    assert a.cell("check x 1") == "ok", a.stderr()
    e = entry(b.status(), "a")
    assert e["parking"] == "resident" and e["unparks"] == 1, e
    unparks = [u for u in b.events("unpark") if u["session"] == "a"]
    assert unparks and unparks[-1]["tier"] == "swap"
    assert c.cell("check y 2") == "ok", c.stderr()
    assert a.cell("check x 1") == "ok"


def test_the_gpus_pools_share_one_host_budget(swap_notebooks, short_tmp):
    """Two GPUs, a host budget of 112 MiB: GPU 0's pool may pin what GPU 1's
    does not need, so a 60 MiB notebook there parks on the swap tier (an
    even split gave each GPU's pool 56 MiB, and it went to the checkpoint
    tier)."""
    b, make = swap_notebooks("100M", "park_idle_s=0", "park_host_budget=112M", "placement=pack",
                             GPUSHARE_SIM_DEVICES="2")
    a, c = make("a"), make("c")
    a_holds_60_mib(b, a, c, 5)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    e = entry(b.status(), "a")
    assert e["parking"] == "parked" and e["park_tier"] == "swap", e
    pools = b.status()["parking"]["pool"]
    assert len(pools) == 2 and pools[0]["lent_bytes"] >= 60 * MIB, pools
    assert sum(p["pinned_bytes"] for p in pools) <= 112 * MIB, pools
    assert a.cell("check x 5") == "ok", a.stderr()  # c goes out (its 50 MiB fit the budget)


def test_a_notebook_parked_on_the_swap_tier_outlives_the_broker(swap_notebooks, short_tmp):
    b, make = swap_notebooks("100M", "park_idle_s=0")
    a, c = make("a"), make("c")
    a_holds_60_mib(b, a, c, 3)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    assert entry(b.status(), "a")["park_tier"] == "swap"
    c.kill()  # its memory is free again
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    # a's hook finds the broker gone and brings its memory back by itself
    # (the chunks it mapped stay valid); its next command runs, bit-exact.
    assert a.command("check x 3", timeout=30) == "ok", a.stderr()
    assert a.command("run 2") == "ok"
    assert "memory is back from host memory" in a.stderr(), a.stderr()


def test_a_process_without_the_swap_tier_is_checkpointed(swap_notebooks, short_tmp):
    b, make = swap_notebooks("100M", "park_idle_s=0")
    a, c = make("a", swap="off"), make("c")
    assert a.cell("alloc x %d" % (60 * MIB)) == "ok", a.stderr()
    assert a.cell("fill x 4") == "ok"
    assert c.cell("alloc y %d" % (20 * MIB)) == "ok"
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    e = entry(b.status(), "a")
    assert e["parking"] == "parked" and e["park_tier"] == "checkpoint", e
    assert a.cell("check x 4") == "ok", a.stderr()


def test_a_pool_that_cannot_pin_sends_the_park_to_the_checkpoint_tier(swap_notebooks,
                                                                       short_tmp):
    # Every host pin of the broker fails (injected into the simulated
    # driver for its pid): the pool stays empty, and a's park goes to the
    # deep tier, with its data.
    b, make = swap_notebooks("100M", "park_idle_s=0")
    code = ("import sys, gpusim; gpusim.inject_failure('cuMemCreate', 1000000, 0, "
            "int(sys.argv[1]))")
    subprocess.run([gstest.PYTHON, "-c", code, str(b.proc.pid)], env=b.env, check=True,
                   timeout=30)
    a, c = make("a"), make("c")
    assert a.cell("alloc x %d" % (60 * MIB)) == "ok", a.stderr()
    assert a.cell("fill x 5") == "ok"
    assert c.cell("alloc y %d" % (20 * MIB)) == "ok"
    wait_for("a failed pin", lambda: b.status()["parking"]["pool"][0]["pin_failures"] > 0)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    st = b.status()
    e = entry(st, "a")
    assert e["parking"] == "parked" and e["park_tier"] == "checkpoint", e
    assert st["parking"]["pool"][0]["pinned_bytes"] == 0
    assert st["parking"]["pool"][0]["last_error"].startswith("cuMemCreate")
    assert "goes to the checkpoint tier" in b.log()
    assert a.cell("check x 5") == "ok", a.stderr()  # c goes out (its 50 MiB fit the budget)


def test_expandable_segments_memory_goes_out_and_back(swap_notebooks, short_tmp):
    # a holds its memory as PyTorch's expandable segments do (its own
    # cuMemCreate pages mapped into a reserved range): the hook adopts the
    # mappings, so they leave the GPU with the rest and come back at the
    # same addresses under the handles the program knows.
    b, make = swap_notebooks("100M", "park_idle_s=0")
    a, c = make("a"), make("c")
    assert a.cell("segment x %d" % (60 * MIB)) == "ok", a.stderr()
    assert a.cell("fill x 6") == "ok"
    assert c.cell("alloc y %d" % (20 * MIB)) == "ok", c.stderr()
    wait_for("the pool to pin 60 MiB", lambda: pinned(b) >= 60 * MIB)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    e = entry(b.status(), "a")
    assert e["parking"] == "parked" and e["park_tier"] == "swap", e
    # The smallest move: only what c lacks (and a slack) went out.
    assert 0 < e["parked_bytes"] < 60 * MIB, e
    assert e["parked_bytes"] + e["resident_bytes"] == 60 * MIB, e
    assert a.cell("check x 6") == "ok", a.stderr()
    assert entry(b.status(), "a")["unparks"] == 1


def test_unmapping_parked_segments_brings_them_back_first(swap_notebooks, short_tmp):
    # While a is parked, its cell unmaps and releases its segment (as
    # torch.cuda.empty_cache() does): the calls wait, as a kernel would,
    # until the broker has brought the memory back, then the program's own
    # handles are released (translated to the driver's new ones), and the
    # memory is free.
    b, make = swap_notebooks("100M", "park_idle_s=0")
    a, c = make("a"), make("c")
    assert a.cell("segment x %d" % (40 * MIB)) == "ok", a.stderr()
    assert a.cell("fill x 7") == "ok"
    assert c.cell("alloc y %d" % (50 * MIB)) == "ok", c.stderr()
    wait_for("the pool to pin 40 MiB", lambda: pinned(b) >= 40 * MIB)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    assert entry(b.status(), "a")["parking"] == "parked"
    c.kill()
    assert a.cell("release x") == "ok", a.stderr()
    e = entry(b.status(), "a")
    assert e["parking"] == "resident" and e["unparks"] == 1, e
    # The hook reports its memory after the call, on its own thread.
    wait_for("a's memory to be given back",
             lambda: entry(b.status(), "a")["resident_bytes"] == 0)
    assert entry(b.status(), "a")["parked_bytes"] == 0
    assert a.cell("segment w %d" % (40 * MIB)) == "ok", a.stderr()
    assert a.cell("fill w 8") == "ok" and a.cell("check w 8") == "ok"


def test_a_program_outside_jupyter_is_parked_on_the_swap_tier_and_its_next_call_brings_it_back(
        swap_notebooks, short_tmp):
    # No launcher, no cells: nothing would tell the broker that p needs the
    # GPU again, but on the swap tier p's own hook does, at its next CUDA
    # call (its gate is closed while its memory is out), so p is parked
    # without park_plain.
    b, make = swap_notebooks("100M", "park_idle_s=0")
    p, c = make("p", cells=False), make("c")
    assert p.command("alloc x %d" % (60 * MIB)) == "ok", p.stderr()
    assert p.command("fill x 9") == "ok"
    assert c.cell("alloc y %d" % (20 * MIB)) == "ok"
    wait_for("p to join", lambda: entry(b.status(), "p"))
    wait_for("the pool to pin 60 MiB", lambda: pinned(b) >= 60 * MIB)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    e = entry(b.status(), "p")
    assert e["parking"] == "parked" and e["park_tier"] == "swap", e
    assert p.command("check x 9") == "ok", p.stderr()  # c is idle: it makes room
    e = entry(b.status(), "p")
    assert e["parking"] == "resident" and e["unparks"] == 1, e


def test_a_program_outside_jupyter_is_never_checkpointed_without_park_plain(swap_notebooks,
                                                                            short_tmp):
    # The pool cannot pin (injected): p would need the checkpoint tier,
    # which nothing could bring it back from, so its park fails with the
    # reason and p runs on, its data intact.
    b, make = swap_notebooks("100M", "park_idle_s=0")
    code = ("import sys, gpusim; gpusim.inject_failure('cuMemCreate', 1000000, 0, "
            "int(sys.argv[1]))")
    subprocess.run([gstest.PYTHON, "-c", code, str(b.proc.pid)], env=b.env, check=True,
                   timeout=30)
    p, c = make("p", cells=False), make("c")
    assert p.command("alloc x %d" % (60 * MIB)) == "ok", p.stderr()
    assert p.command("fill x 10") == "ok"
    wait_for("p to join", lambda: entry(b.status(), "p"))
    assert c.cell("alloc y %d" % (50 * MIB)) == "err CUDA_ERROR_OUT_OF_MEMORY"
    e = entry(b.status(), "p")
    assert e["parks"] == 0 and "parks on the swap tier only" in e["parking"], e
    assert b.events("park_failed")[-1]["session"] == "p"
    assert p.command("check x 10") == "ok", p.stderr()


def test_a_notebook_idle_past_park_deep_idle_s_goes_to_the_deep_tier(swap_notebooks, short_tmp):
    # Idle longer than park_deep_idle_s when it is parked: checkpointed
    # (which frees its context and pins no host memory), not swapped.
    b, make = swap_notebooks("100M", "park_idle_s=0", "park_deep_idle_s=0.3")
    a, c = make("a"), make("c")
    a_holds_60_mib(b, a, c, 11)
    wait_for("a to be idle for park_deep_idle_s", lambda: entry(b.status(), "a")["idle_s"] > 0.4)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    e = entry(b.status(), "a")
    assert e["parking"] == "parked" and e["park_tier"] == "checkpoint", e
    assert "goes to the deep tier" in b.log()
    assert a.cell("check x 11") == "ok", a.stderr()


def test_a_notebook_parked_on_the_swap_tier_for_long_moves_to_the_deep_tier(swap_notebooks,
                                                                            short_tmp):
    # Parked on the swap tier, then parked for park_deep_idle_s: once the
    # GPU has room it is brought back and checkpointed; its pinned host
    # memory goes back to the pool; its data comes back from the deep tier.
    b, make = swap_notebooks("100M", "park_idle_s=0")
    a, c = make("a"), make("c")
    a_holds_60_mib(b, a, c, 12)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    assert entry(b.status(), "a")["park_tier"] == "swap"
    assert c.cell("free z") == "ok" and c.cell("free y") == "ok"  # room again
    gstest.configure(b.endpoint, park_deep_idle_s=0.2)
    wait_for("a to move to the deep tier",
             lambda: any(p["session"] == "a" and p["tier"] == "checkpoint"
                         for p in b.events("park")))
    e = entry(b.status(), "a")
    assert e["parking"] == "parked" and e["park_tier"] == "checkpoint", e
    assert b.status()["parking"]["pool"][0]["lent_bytes"] == 0
    assert a.cell("check x 12") == "ok", a.stderr()


def inject_into(b, pid, call, count=1):
    """The next `count` calls of `call` by process pid fail (simulated
    driver)."""
    code = ("import sys, gpusim; gpusim.inject_failure(sys.argv[1], int(sys.argv[2]), 0, "
            "int(sys.argv[3]))")
    subprocess.run([gstest.PYTHON, "-c", code, call, str(count), str(pid)], env=b.env,
                   check=True, timeout=30)


@pytest.mark.parametrize("call", ["cuMemImportFromShareableHandle", "cuMemSetAccess",
                                  "cuMemcpy", "cuMemUnmap"])
def test_a_failed_swap_out_step_leaves_the_notebook_running_with_its_data(swap_notebooks,
                                                                          short_tmp, call):
    # Each step of a swap out in the notebook's process fails once: opening
    # the host window (import, access), a copy, releasing copied memory.
    # The park fails with the reason, whatever moved comes back, and the
    # notebook runs on, bit-exact; the next park succeeds.
    b, make = swap_notebooks("100M", "park_idle_s=0")
    a, c = make("a"), make("c")
    a_holds_60_mib(b, a, c, 13)
    inject_into(b, a.pid, call)
    got = c.cell("alloc z %d" % (30 * MIB))  # refused, or served by a later park
    failed = [f for f in b.events("park_failed") if f["session"] == "a"]
    assert failed and failed[0]["left_running"], b.events("park_failed")
    step = {"cuMemUnmap": "releasing copied memory"}.get(call, call)
    assert step in failed[0]["error"], failed
    if got == "ok":  # the request tried again: a's second park made the room
        e = entry(b.status(), "a")
        assert e["parking"] == "parked" and e["park_tier"] == "swap", e
    assert a.cell("check x 13") == "ok", a.stderr()
    assert a.cell("run 2") == "ok"
    if got != "ok":
        assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
        e = entry(b.status(), "a")
        assert e["parking"] == "parked" and e["park_tier"] == "swap", e
    assert a.cell("check x 13") == "ok", a.stderr()


@pytest.mark.parametrize("call", ["cuMemCreate", "cuMemMap", "cuMemcpy"])
def test_a_failed_swap_in_step_is_retried_and_loses_nothing(swap_notebooks, short_tmp, call):
    # Bringing a back fails once (physical memory for a segment, mapping
    # it, a copy): its bytes stay in host memory and the cell runs on its
    # data.  No memory (cuMemCreate, cuMemMap fail with OUT_OF_MEMORY) is
    # what a switch sees while the other side still frees the GPU, so the
    # hook tries again in place; a failed copy fails the unpark, which the
    # broker tries again.
    b, make = swap_notebooks("100M", "park_idle_s=0")
    a, c = make("a"), make("c")
    a_holds_60_mib(b, a, c, 14)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    assert entry(b.status(), "a")["parking"] == "parked"
    inject_into(b, a.pid, call)
    assert a.cell("check x 14") == "ok", a.stderr()
    failed = [f for f in b.events("unpark_failed") if f["session"] == "a"]
    assert bool(failed) == (call == "cuMemcpy"), failed
    e = entry(b.status(), "a")
    assert e["parking"] == "resident" and e["unparks"] == 1, e


def _dropped_while_parked(b, a, c, seed):
    """a parked on the swap tier, then stopped (SIGSTOP) for longer than
    the broker waits for a heartbeat: the broker drops it.  Returns what
    the pool had lent before the drop."""
    a_holds_60_mib(b, a, c, seed)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    assert entry(b.status(), "a")["park_tier"] == "swap"
    lent = b.status()["parking"]["pool"][0]["lent_bytes"]
    assert lent >= 60 * MIB
    a.proc.send_signal(signal.SIGSTOP)
    gstest.wait_until(lambda: [e for e in b.events("client_gone") if e["pid"] == a.pid],
                      what="a dropped for its silence")
    return lent


def test_a_parked_process_dropped_while_stopped_keeps_its_host_memory(swap_notebooks,
                                                                       short_tmp):
    """Issue 15 (fencing) with the swap tier: a process dropped while it
    still runs maps its chunks, which hold its memory.  They stay lent to it
    (no one else may get them) and it takes them back when it joins again;
    its next cell brings its memory back bit-exact."""
    b, make = swap_notebooks("100M", "park_idle_s=0", "heartbeat_ms=300")
    a, c = make("a"), make("c")
    try:
        lent = _dropped_while_parked(b, a, c, 8)
        assert b.status()["parking"]["pool"][0]["lent_bytes"] == lent
        assert "is kept for it" in b.log()
    finally:
        a.proc.send_signal(signal.SIGCONT)
    gstest.wait_until(lambda: "takes back its memory" in b.log(),
                      what="a joining again with its lease")
    assert a.cell("check x 8") == "ok", a.stderr()
    assert entry(b.status(), "a")["parking"] == "resident"
    assert c.cell("run 1") == "ok", c.stderr()


def test_the_memory_of_a_resident_process_dropped_while_stopped_stays_counted(swap_notebooks,
                                                                             short_tmp):
    """Issue 15 (chaos test): the broker forgot the memory of a process it
    dropped for its silence, which holds it still, and let a parked session
    back into memory that was not free: its hook waited 30 s for memory and
    its swap-in failed.  The memory stays counted until the process joins
    again (then it can be parked) or dies."""
    b, make = swap_notebooks("100M", "park_idle_s=0", "heartbeat_ms=300")
    a, c = make("a"), make("c")
    a_holds_60_mib(b, a, c, 10)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()  # a goes out
    assert a.cell("check x 10") == "ok", a.stderr()  # a comes back, c goes out
    assert entry(b.status(), "c")["parking"] == "parked"
    try:
        a.proc.send_signal(signal.SIGSTOP)
        gstest.wait_until(lambda: [e for e in b.events("client_gone") if e["pid"] == a.pid],
                          what="a dropped for its silence")
        assert "is kept for it" in b.log()
        c.launcher.cell(c.session, "busy", "c-wants")
        c.send("run 1")
        gstest.wait_until(lambda: "session c waits to be unparked" in b.log(),
                          what="c waiting for a's memory")
        assert "held by processes dropped while they run" in b.log()
        assert entry(b.status(), "c")["parking"] == "parked"
    finally:
        a.proc.send_signal(signal.SIGCONT)
    assert c.answer() == "ok", c.stderr()  # a joined again, went out, c came in
    c.launcher.cell(c.session, "idle", "c-wants")
    assert "failed" not in b.log(), b.log()
    assert a.cell("check x 10") == "ok", a.stderr()


def test_a_held_lease_returns_to_the_pool_when_its_process_dies(swap_notebooks, short_tmp):
    b, make = swap_notebooks("100M", "park_idle_s=0", "heartbeat_ms=300")
    a, c = make("a"), make("c")
    lent = _dropped_while_parked(b, a, c, 9)
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(10)
    gstest.wait_until(lambda: b.status()["parking"]["pool"][0]["lent_bytes"] <= lent - 60 * MIB,
                      what="a's chunks back in the pool")
    assert "the memory held for it is free" in b.log()
    assert c.cell("run 1") == "ok", c.stderr()


class Member(gstest.Notebook):
    """One more process of an existing session (a plain program): the
    broker swaps a session's processes out and in together."""

    def __init__(self, name, session, env, tmp_path):
        gstest.Proc.__init__(self, [gstest.PYTHON, gstest.WORKER, "commands"],
                             dict(env, GPUSHARE_SESSION=session), tmp_path, name, bufsize=1)
        self.launcher, self.session, self.cells, self.n = None, session, False, 0


def test_a_process_joining_again_during_a_failed_swap_in_gets_no_second_swap_in(notebooks,
                                                                                 short_tmp):
    """Chaos seed 13: session a (two processes) comes back, both wait for
    memory; a2 is dropped for its silence (SIGSTOP) and joins again while
    a1 still waits.  Its drop failed the unpark, whose retry brings a2 back;
    the broker sends it no swap_in of the failed one besides (it would wait
    for memory again on a2's swap thread, behind the first).  Whether a2
    joins before a1's wait ends depends on the machine's speed; the answer
    must hold either way."""
    b, sim, make = notebooks("100M", "park_idle_s=0", "heartbeat_ms=300",
                             GPUSHARE_POOL_CHUNK=str(CHUNK))
    a1 = make("a", False, GPUSHARE_SWAP="on")
    a2 = Member("a2", "a", gstest.hook_env(sim, b.endpoint, GPUSHARE_SWAP="on"), short_tmp)
    try:
        c = make("c", True, GPUSHARE_SWAP="on")
        for p, seed in ((a1, 21), (a2, 22)):
            assert p.command("alloc x %d" % (30 * MIB)) == "ok", p.stderr()
            assert p.command("fill x %d" % seed) == "ok"
        assert c.cell("alloc y %d" % (20 * MIB)) == "ok", c.stderr()
        wait_for("the pool to pin 60 MiB", lambda: pinned(b) >= 60 * MIB)
        assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()  # a goes out
        e = entry(b.status(), "a")
        assert e["parking"] == "parked" and e["park_tier"] == "swap", e
        for p in (a1, a2):  # no memory for either until told
            inject_into(b, p.pid, "cuMemCreate", 1000000)
        try:
            a1.send("check x 21")  # brings a back (c goes out)
            gstest.wait_until(lambda: "unparking session a" in b.log(),
                              what="a's unpark", interval=0.01)
            a2.proc.send_signal(signal.SIGSTOP)
            gstest.wait_until(lambda: [e for e in b.events("client_gone") if e["pid"] == a2.pid],
                              what="a2 dropped for its silence", interval=0.01)
        finally:
            a2.proc.send_signal(signal.SIGCONT)
        gstest.wait_until(lambda: "pid %d joined session a again" % a2.pid in b.log(),
                          what="a2 joining again")
        for p in (a1, a2):
            inject_into(b, p.pid, "cuMemCreate", 0)
        assert a1.answer() == "ok", a1.stderr()
        assert a2.command("check x 22") == "ok", a2.stderr()
        assert "pid %d comes back with the rest" % a2.pid not in b.log(), b.log()
    finally:
        a2.kill()


def test_a_switch_needs_host_room_for_one_notebook_not_two(notebooks, short_tmp):
    """Three notebooks of 40 MiB take turns on a GPU where two fit, with a
    host budget of 48 MiB: room for one parked notebook and two chunks.
    Each switch parks the outgoing notebook on the swap tier all the same:
    its lease grows with the chunks the incoming one returns as its memory
    comes back (the relay).  Before, the outgoing one needed a whole lease
    of its own, which the budget refused ("parking would exceed the host
    budget"), and the switch waited for ever."""
    b, sim, make = notebooks("100M", "park_idle_s=0", "park_host_budget=48M",
                             GPUSHARE_POOL_CHUNK=str(CHUNK))
    nbs = {n: make(n, True, GPUSHARE_SWAP="on", GPUSHARE_SWAP_SEGMENT="4M") for n in "abc"}
    for seed, n in enumerate("ab", 1):
        assert nbs[n].cell("alloc x %d" % (40 * MIB)) == "ok", nbs[n].stderr()
        assert nbs[n].cell("fill x %d" % seed) == "ok"
    wait_for("the pool to pin 44 MiB", lambda: pinned(b) >= 44 * MIB)
    assert nbs["c"].cell("alloc x %d" % (40 * MIB)) == "ok", nbs["c"].stderr()
    assert nbs["c"].cell("fill x 3") == "ok"
    seeds = {"a": 1, "b": 2, "c": 3}
    for rnd in range(2):
        for n in "abc":
            assert nbs[n].cell("check x %d" % seeds[n]) == "ok", (n, nbs[n].stderr(), b.log())
            assert nbs[n].cell("run 1") == "ok"
    parks = b.events("park")
    assert len(parks) >= 5, parks
    assert all(p["tier"] == "swap" for p in parks), parks
    assert not b.events("park_failed") and not b.events("unpark_failed"), b.events()
    assert "goes out on the swap tier while session" in b.log(), b.log()
    for p in b.status()["parking"]["pool"]:
        assert p["pinned_bytes"] <= 48 * MIB, p
    for n in "abc":
        assert nbs[n].cell("check x %d" % seeds[n]) == "ok", nbs[n].stderr()


def test_memory_that_cannot_come_back_after_a_broker_restart_gets_room_from_the_new_one(
        swap_notebooks, short_tmp):
    """Chaos seed 3: p is parked on the swap tier, the broker is killed and
    c fills the GPU, so p's hook cannot bring its memory back by itself.
    The new broker learns of that memory from p's report and makes room
    for it as for any unpark: it parks c (a program outside Jupyter: the
    swap tier only) into its new pool, then sends p swap_in.  c reaches
    the new broker first (p is stopped meanwhile), as in the chaos run:
    the pool's target is set while c alone holds memory and is not looked
    at again for 20 ms, so c's first park, in the same moment as p's
    report, is refused, and c is not picked again for a second.  Before
    the fix nothing looked again when that second ended (no event comes:
    both programs wait), and p waited for ever."""
    b, make = swap_notebooks("100M", "park_idle_s=0")
    p, c = make("p", cells=False), make("c", cells=False)
    assert p.command("alloc x %d" % (60 * MIB)) == "ok", p.stderr()
    assert p.command("fill x 15") == "ok"
    assert c.command("alloc y %d" % (20 * MIB)) == "ok", c.stderr()
    wait_for("p and c to join", lambda: entry(b.status(), "p") and entry(b.status(), "c"))
    wait_for("the pool to pin 60 MiB", lambda: pinned(b) >= 60 * MIB)
    assert c.command("alloc z %d" % (30 * MIB)) == "ok", c.stderr()  # p goes out
    e = entry(b.status(), "p")
    assert e["parking"] == "parked" and e["park_tier"] == "swap", e
    assert c.command("alloc w %d" % (40 * MIB)) == "ok", c.stderr()  # the GPU is full
    assert c.command("fill w 16") == "ok"
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    gstest.wait_until(lambda: "could not come back yet" in p.stderr(),
                      what="p's hook to find no memory for its own")
    p.proc.send_signal(signal.SIGSTOP)
    b2 = gstest.Broker(short_tmp, b.env, b.args)
    b2.stderr_path = short_tmp / "broker-2.stderr"
    try:
        try:
            b2.start()
            wait_for("c to report its memory to the new broker",
                     lambda: (entry(b2.status(), "c") or {}).get("resident_bytes") == 90 * MIB)
        finally:
            p.proc.send_signal(signal.SIGCONT)
        assert p.command("check x 15", timeout=30) == "ok", p.stderr()
        assert c.command("check w 16", timeout=30) == "ok", c.stderr()
        # (one event log for both brokers; the first never parked c)
        assert [ev for ev in b.events("park") if ev["session"] == "c" and ev["tier"] == "swap"]
    except AssertionError as e:
        raise AssertionError("%s\nthe new broker's log:\n%s" % (e, b2.log())) from None
    finally:
        b2.stop()
