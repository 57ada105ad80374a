"""Many users, one server (issue 34, item 4): the hook's emulated legacy
CUDA IPC between real accounts (gsusers.py).  Memory of the swap tier is
shared through a server of the exporting process on an abstract unix
socket, a name anyone may bind and /proc/net/unix shows to everyone.
gs-mallory serves the name of alice's exporter once it is gone (even with
alice's handle leaked to her), squats names ahead of alice's exporter, and
holds connections to it open; alice's imports open her own memory
bit-exact or fail closed with CUDA_ERROR_INVALID_HANDLE.  A handle is a
capability, as the driver's: bob, who was given one, opens it; mallory,
with a forged one, does not.

No broker: IPC is between the processes (the hooks run ungated, which
changes nothing here).  The parties are tests/python/ipcpeer.py."""
import os

import pytest

import gstest
import gsusers
from gsusers import ALICE, BOB, MALLORY

pytestmark = gsusers.needs_root

PEER = os.path.join(gstest.HERE, "ipcpeer.py")
SIZE = 6 << 20  # whole 2 MiB granules: memory of the swap tier, shared by the emulation


@pytest.fixture
def sim():
    env = gsusers.shared_sim(memory="1G")
    yield env
    gstest.unlink_sim(env)


class Party:
    """ipcpeer.py run as a user; stopped at the end of the test."""

    def __init__(self, user, mode, args, env, tmp_path, name):
        argv = gsusers.argv_as(user, [gstest.PYTHON, PEER, mode] + [str(a) for a in args])
        self.p = gstest.Proc(argv, gsusers.env_of(user, env), tmp_path, name)

    def ask(self, line, prefix=("ok", "bad", "err", "handle"), timeout=30):
        self.p.send(line)
        got = self.p.expect("", timeout)
        assert got.startswith(prefix), "%s: %s\n%s" % (self.p.name, got, self.p.stderr())
        return got

    def stop(self):
        self.p.kill()


@pytest.fixture
def parties(sim, tmp_path):
    started = []

    def start(user, mode="cuda", args=(), name=None):
        env = gstest.hook_env(sim, "ipc:///nonexistent/gpushare-ipc-test.sock") \
            if mode == "cuda" else {k: v for k, v in sim.items() if k != "LD_PRELOAD"}
        p = Party(user, mode, args, env, tmp_path, name or "%s-%s-%d" % (user, mode, len(started)))
        started.append(p)
        if mode == "cuda":
            p.pid = int(p.p.expect("ready ").split()[1])
        return p

    yield start
    for p in started:
        p.stop()


def export(party, seed):
    return party.ask("export %d %d" % (SIZE, seed)).split()[1]


def test_alice_shares_memory_between_her_processes_bit_exact(parties):
    a, b = parties(ALICE), parties(ALICE)
    handle = export(a, 7)
    assert b.ask("open %s %d 7" % (handle, SIZE)) == "ok"
    assert a.ask("again") == "handle " + handle, "one allocation, one handle (as the driver's)"


def test_mallory_serving_a_gone_exporters_name_is_refused(parties):
    a, b = parties(ALICE), parties(ALICE)
    handle = export(a, 7)
    a.stop()  # the exporter is gone; its name is free for anyone to bind
    m = parties(MALLORY, "impostor", (handle, SIZE))  # and she even has the handle
    m.p.expect("listening")
    got = b.ask("open %s %d 7" % (handle, SIZE))
    assert got == "err CUDA_ERROR_INVALID_HANDLE", got
    assert m.p.expect("received ") == "received 0", "the handle's key reached mallory"
    log = b.p.stderr()
    assert "refusing a CUDA IPC handle of pid %d" % a.pid in log, log
    assert "of uid %d, not by the exporter" % gsusers.uid(MALLORY) in log, log


def test_squatting_names_does_not_stop_an_export(parties):
    a, b = parties(ALICE), parties(ALICE)
    # Alice's exporter is running (its pid known) but has not exported yet:
    # mallory takes every name she can think of for it and the next pids.
    m = parties(MALLORY, "squat", (a.pid, 1000))
    assert m.p.expect("squatted ") == "squatted 1010"
    handle = export(a, 11)
    assert b.ask("open %s %d 11" % (handle, SIZE)) == "ok"


def test_mallorys_idle_connections_do_not_stop_an_import(parties):
    a, b = parties(ALICE), parties(ALICE)
    handle = export(a, 3)
    m = parties(MALLORY, "idle", (a.pid, 200))
    assert m.p.expect("holding ").startswith("holding 200 @gpushare-ipc-%d-" % a.pid)
    assert b.ask("open %s %d 3" % (handle, SIZE), timeout=10) == "ok"


def test_a_handle_is_a_capability(parties):
    a, bob, m = parties(ALICE), parties(BOB), parties(MALLORY)
    handle = export(a, 5)
    assert bob.ask("open %s %d 5" % (handle, SIZE)) == "ok"  # given the handle, as with CUDA
    raw = bytearray.fromhex(handle)
    raw[40] ^= 1  # the ask key: a handle she made up from what she can see
    got = m.ask("open %s %d 5" % (raw.hex(), SIZE))
    assert got == "err CUDA_ERROR_INVALID_HANDLE", got
    gstest.wait_until(lambda: "refused pid %d (uid %d)" % (m.pid, gsusers.uid(MALLORY))
                      in a.p.stderr(), timeout=10, what="the exporter's log of the refusal")
    assert bob.ask("open %s %d 5" % (handle, SIZE)) == "ok"  # still served
