"""Every parking tier survives the broker's death: a process the broker
left on the checkpoint tier (locked and checkpointed) cannot bring itself
back, since its CUDA calls block inside the locked driver, so its hook
starts gpushare-restore (libhook/restore/) for it when the broker is lost.
On the simulated GPU, with no new broker: a notebook's next command runs,
bit-exact; with no room on the GPU the helper waits for memory and says so,
and the process comes back once another frees it; a program outside
Jupyter parked with park_plain=on runs on; and a broker started while the
helper waits stops it and adopts the process, which comes back once.
The helper's command line refuses bad input with the problem named."""
import os
import signal
import subprocess

import pytest

import gstest
from gstest import MIB, entry, park_broker, wait_until

SIZE = 60 * MIB
CHECKPOINT = ("park_idle_s=0", "park_swap=off")  # the checkpoint tier only
WAITING = "waiting for GPU memory"


def helpers_of(pid):
    """gpushare-restore children of pid, zombies included (comm is cut to
    15 characters)."""
    return [c for c, (comm, _, ppid) in gstest._procs().items()
            if ppid == pid and comm == "gpushare-restor"]


def no_helper_left(pid):
    """The helper ended and the hook reaped it: no zombie stays."""
    wait_until(lambda: not helpers_of(pid), what="the helper of %d reaped" % pid)


def parked_a(notebooks, *settings):
    """a holds 60 MiB of 100 MiB (pattern 1) and is parked on the
    checkpoint tier because b took 60 MiB (pattern 2)."""
    broker, sim, make = notebooks("100M", *CHECKPOINT, *settings)
    a, b = make("a"), make("b")
    assert a.cell("alloc x %d" % SIZE) == "ok", a.stderr()
    assert a.cell("fill x 1") == "ok"
    assert b.cell("alloc x %d" % SIZE) == "ok", b.stderr()
    assert b.cell("fill x 2") == "ok"
    e = entry(broker.status(), "a")
    assert e["parking"] == "parked" and e["park_tier"] == "checkpoint", e
    return broker, sim, a, b


def kill(broker):
    broker.stop(signal.SIGKILL)


def test_a_notebook_comes_back_by_itself_when_the_broker_dies(notebooks, short_tmp):
    broker, sim, a, b = parked_a(notebooks)
    assert b.cell("free x") == "ok"  # room for a, which stays parked until its next cell
    assert entry(broker.status(), "a")["parking"] == "parked"
    kill(broker)
    # No broker will come: the helper restores and unlocks a.
    assert a.command("check x 1", timeout=30) == "ok", a.stderr()
    assert a.command("run 2") == "ok"
    err = a.stderr()
    assert "lost the gpushare broker" in err
    assert "bringing pid %d back from the checkpoint tier" % a.pid in err, err
    assert "pid %d runs again" % a.pid in err, err
    assert WAITING not in err
    no_helper_left(a.pid)


def test_with_no_room_the_helper_waits_for_memory_and_says_so(notebooks, short_tmp):
    broker, sim, a, b = parked_a(notebooks)
    kill(broker)  # b still holds the memory a needs
    wait_until(lambda: WAITING in a.stderr(), what="a's helper to wait for memory")
    [helper] = helpers_of(a.pid)
    # Not hooked: no LD_PRELOAD, and the hook would pass through anyway.
    env = open("/proc/%d/environ" % helper, "rb").read().split(b"\0")
    assert not [v for v in env if v.startswith(b"LD_PRELOAD=")], env
    assert b"GPUSHARE_DISABLE=1" in env
    assert "libgpushare-hook" not in open("/proc/%d/maps" % helper).read()
    assert b.command("free x") == "ok"  # b runs ungated now, and gives the memory back
    assert a.command("check x 1", timeout=30) == "ok", a.stderr()
    err = a.stderr()
    assert "no room on the GPU for pid %d yet" % a.pid in err, err
    # Never a restore into too little memory (one that runs out of memory
    # leaves the process checkpointed for good): the helper looked first.
    assert "CUDA_ERROR" not in err and "pid %d runs again" % a.pid in err, err
    assert err.count(WAITING) == 1, err  # said once, not at every try
    no_helper_left(a.pid)


def test_a_plain_program_parked_with_park_plain_runs_on(notebooks, short_tmp):
    broker, sim, make = notebooks("100M", *CHECKPOINT, "park_plain=on")
    p, b = make("p", cells=False), make("b")
    assert p.command("alloc x %d" % SIZE) == "ok" and p.command("fill x 4") == "ok"
    wait_until(lambda: entry(broker.status(), "p"), what="p joined")
    assert b.cell("alloc x %d" % SIZE) == "ok", b.stderr()
    e = entry(broker.status(), "p")
    assert e["parking"] == "parked" and e["park_tier"] == "checkpoint", e
    kill(broker)
    b.kill()  # the GPU has room for p again; no broker to see it
    assert p.command("check x 4", timeout=30) == "ok", p.stderr()
    assert p.command("run 2") == "ok"
    assert "pid %d runs again" % p.pid in p.stderr()
    no_helper_left(p.pid)


def test_a_broker_started_while_the_helper_waits_adopts_the_process(notebooks, short_tmp):
    broker, sim, a, b = parked_a(notebooks)
    kill(broker)
    wait_until(lambda: WAITING in a.stderr(), what="a's helper to wait for memory")
    again = park_broker(short_tmp, sim, *CHECKPOINT)
    try:
        # a's hook reconnects and stops its helper before it joins; the new
        # broker finds a checkpointed and adopts it.
        wait_until(lambda: "stopped (a gpushare broker is back)" in a.stderr(),
                   what="a's helper stopped")
        no_helper_left(a.pid)
        wait_until(lambda: again.events("park_adopted"), what="a adopted by the new broker")
        assert b.command("check x 2") == "ok"
        b.kill()  # its memory goes back: the new broker brings a back
        try:
            wait_until(lambda: (entry(again.status(), "a") or {}).get("unparks"),
                       what="a unparked by the new broker")
        except AssertionError:
            raise AssertionError("a not unparked by the new broker:\n" + again.log()[-4000:])
        assert a.command("check x 1", timeout=30) == "ok", a.stderr()
        adopted = again.events("park_adopted")
        assert [e["session"] for e in adopted] == ["a"], adopted
        # While b held the memory the broker's tries found no room; nothing
        # else failed (a helper still at work would show as an illegal state).
        for e in again.events("unpark_failed"):
            assert "OUT_OF_MEMORY" in e["error"] and "ILLEGAL_STATE" not in e["error"], e
        assert entry(again.status(), "a")["unparks"] == 1
        assert "pid %d runs again" % a.pid not in a.stderr()  # the broker did it, once
    finally:
        again.stop()


@pytest.mark.parametrize("args, problem", [
    ([], "--pid is missing"),
    (["--pid", "12"], "--start is missing"),
    (["--pid", "x1", "--start", "5"], "--pid x1: not a process id"),
    (["--pid", "-3", "--start", "5"], "--pid -3: not a process id"),
    (["--pid", "12", "--start", "0"], "--start 0: not a start time"),
    (["--pid"], "--pid needs a process id"),
    (["--pid", "12", "--start", "5", "--wait"], "unknown argument --wait"),
])
def test_the_helper_names_what_is_wrong_with_its_command_line(args, problem):
    r = subprocess.run([gstest.RESTORE_HELPER] + args, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2, r
    assert problem in r.stderr and "usage: gpushare-restore" in r.stderr, r.stderr


def test_the_helper_leaves_a_process_of_another_start_time_alone(sim):
    start = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    r = subprocess.run([gstest.RESTORE_HELPER, "--pid", str(os.getpid()), "--start",
                        str(start + 1)], capture_output=True, text=True, env=sim, timeout=30)
    assert r.returncode == 3, r
    assert "is not the process that started at %d" % (start + 1) in r.stderr, r.stderr
    # The right one, but this process never used the (simulated) driver:
    # the driver's refusal is named, tried a few times, then given up.
    r = subprocess.run([gstest.RESTORE_HELPER, "--pid", str(os.getpid()), "--start", str(start)],
                       capture_output=True, text=True, env=sim, timeout=60)
    assert r.returncode == 1, r
    assert ("reading the state of pid %d failed (cuCheckpointProcessGetState: "
            "CUDA_ERROR_INVALID_VALUE)" % os.getpid()) in r.stderr, r.stderr
    assert "giving up" in r.stderr, r.stderr


def test_the_broker_dies_with_sessions_parked_on_both_tiers(notebooks, short_tmp):
    """Chaos (issue 33): three notebooks of 40 MiB on a 100 MiB GPU, one
    parked on each tier and one resident, and the broker is killed.  With
    no broker, the checkpoint-tier one is brought back by its helper, the
    swap-tier one by its own hook (its gate stays closed until its memory
    is back), each as soon as the GPU has room; every byte comes back."""
    broker, sim, make = notebooks("100M", "park_idle_s=0")
    size = 40 * MIB
    ck = make("ck", GPUSHARE_SWAP="off")
    sw, res = make("sw"), make("res")
    for seed, nb in enumerate((ck, sw), 1):
        assert nb.cell("alloc x %d" % size) == "ok", nb.stderr()
        assert nb.cell("fill x %d" % seed) == "ok"
    assert res.cell("alloc x %d" % size) == "ok", res.stderr()  # parks one of them
    assert res.cell("fill x 3") == "ok"
    # The other goes too: res takes a second buffer.
    assert res.cell("alloc y %d" % size) == "ok", res.stderr()
    st = broker.status()
    tiers = {n: entry(st, n).get("park_tier") for n in ("ck", "sw")}
    assert entry(st, "ck")["parking"] == "parked" and entry(st, "sw")["parking"] == "parked", st
    assert tiers == {"ck": "checkpoint", "sw": "swap"}, tiers
    kill(broker)
    assert res.command("check x 3") == "ok"
    # sw may have left part of its memory on the GPU (a partial park):
    # res gives back all it holds, and both come back.
    assert res.command("free y") == "ok" and res.command("free x") == "ok"
    assert ck.command("check x 1", timeout=30) == "ok", ck.stderr()
    assert sw.command("check x 2", timeout=30) == "ok", sw.stderr()
    assert ck.command("check x 1") == "ok" and ck.command("run 1") == "ok"
    no_helper_left(ck.pid)
