"""Many users, one server (issue 34): the product as ordinary accounts use
it through the system broker (gsusers.py creates gs-alice, gs-bob and
gs-mallory).  Each test is one surface between users; all need root to
create the accounts and are skipped otherwise."""
import os

import pytest

import gstest
import gsusers
from gsusers import ALICE, BOB

pytestmark = gsusers.needs_root


@pytest.fixture
def system(tmp_path):
    """A system broker (socket group gs-users) on a simulated GPU that all
    users share; yields (broker, sim env)."""
    sim = gsusers.shared_sim(memory="1G")
    b = gsusers.system_broker(sim).start()
    yield b, sim
    b.stop()
    gstest.unlink_sim(sim)


def worker(user, b, sim, tmp_path, mode="commands", name=None):
    """gpuworker.py as user, its hook talking to the system broker."""
    env = gsusers.env_of(user, gstest.hook_env(sim, b.endpoint))
    argv = gsusers.argv_as(user, [gstest.PYTHON, gstest.WORKER, mode, "1000", name or user])
    return gstest.Proc(argv, env, tmp_path, name or user)


def test_two_users_each_see_their_own_session_under_their_name(system, tmp_path):
    b, sim = system
    ws = [worker(u, b, sim, tmp_path) for u in (ALICE, BOB)]
    try:
        for w in ws:
            w.send("run 1")
            assert w.wait_line("ok", timeout=30)
        users = {s["user"] for s in b.sessions().values()}
        assert {ALICE, BOB} <= users, b.sessions()
        r = gsusers.run(ALICE, [gstest.CLI, "--broker", b.endpoint, "status"],
                        env=gsusers.env_of(ALICE, b.env))
        assert r.returncode == 0, r.stderr
        assert ALICE in r.stdout and BOB in r.stdout
    finally:
        for w in ws:
            w.kill()
