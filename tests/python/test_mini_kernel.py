"""tests/gpu/mini_kernel.py, the stand-in for ipykernel on the GPU machine
(no Jupyter there), driven by the real gpushare-launch against the real
broker on the simulated GPU: the broker must see what it sees of an
ipykernel notebook - the registration with the kernel id, each cell's busy
and idle with the same msg_id, grants to the session's process and the
revoke when a cell ends (cell_idle)."""
import json
import os
import subprocess
import sys

import pytest

import gstest

MINI = os.path.join(gstest.SRCDIR, "tests", "gpu", "mini_kernel.py")
SCRIPT = """
import gpusim, sys
from mini_kernel import cell, cells_run
gpusim.init()
for i in range(3):
    with cell():
        gpusim.launch(us=2000); gpusim.synchronize()
print("cells", len(cells_run))
sys.exit(7)
"""


@pytest.fixture
def logged_broker(tmp_path, sim):
    b = gstest.Broker(tmp_path, sim, args=["--policy", "exclusive", "--event-log",
                                           str(tmp_path / "events.jsonl")]).start()
    yield b
    b.stop()


def events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_mini(tmp_path, env, *launch_args):
    script = tmp_path / "notebook.py"
    script.write_text(SCRIPT)
    conn = tmp_path / "kernel-mini-0001.json"
    subprocess.run([sys.executable, MINI, "--write-connection", str(conn)], check=True)
    env = dict(env, GPUSHARE_IDLE_RELEASE_MS="0", PYTHONPATH=os.path.join(gstest.SRCDIR, "tests",
                                                                          "simcuda"))
    env.pop("GPUSHARE_SESSION", None)
    return subprocess.run([gstest.LAUNCH] + list(launch_args) +
                          ["--", sys.executable, MINI, "-f", str(conn), str(script)],
                          env=env, capture_output=True, text=True, timeout=120)


def test_broker_sees_cells_of_the_mini_kernel_as_of_a_notebook(tmp_path, logged_broker):
    r = run_mini(tmp_path, logged_broker.env, "--strict")
    assert r.returncode == 7, r.stderr          # the kernel's own exit status
    assert "cells 3" in r.stdout, r.stdout
    ev = events(tmp_path / "events.jsonl")
    reg = [e for e in ev if e["event"] == "register"]
    assert [e["session"] for e in reg] == ["mini-0001"], reg
    cells = [(e["state"], e["msg_id"]) for e in ev if e["event"] == "cell"]
    assert [s for s, _ in cells] == ["busy", "idle"] * 3, cells
    assert all(cells[i][1] == cells[i + 1][1] for i in range(0, 6, 2)), cells
    assert len({m for _, m in cells}) == 3, cells
    grants = [e for e in ev if e["event"] == "grant" and e["session"] == "mini-0001"]
    revokes = [e for e in ev if e["event"] == "revoke" and e["session"] == "mini-0001"]
    releases = [e for e in ev if e["event"] == "release" and e["session"] == "mini-0001"]
    # Every grant is taken back because a cell ended (a back-to-back cell may
    # run on a grant whose revoke is still in flight, so 1 to 3 grants).
    assert 1 <= len(grants) <= 3, ev
    assert all(e["reason"] == "cell_idle" for e in revokes), revokes
    # ... except one the kernel still held when it exited: its exit gave it
    # back before the last cell's end reached the broker (a loaded machine).
    unrevoked = {g["grant_id"] for g in grants} - {e["grant_id"] for e in revokes}
    assert all(any(e["grant_id"] == gid and e.get("reason") == "exit" for e in releases)
               for gid in unrevoked), ev
    assert sorted(e["grant_id"] for e in releases) == sorted(e["grant_id"] for e in grants), ev


def test_mini_kernel_without_a_broker_runs_its_cells(tmp_path, sim):
    env = dict(sim, GPUSHARE_BROKER="ipc://%s" % (tmp_path / "nobroker.sock"))
    r = run_mini(tmp_path, env)
    assert r.returncode == 7, r.stderr
    assert "cells 3" in r.stdout, r.stdout


def test_native_run_without_connection_file(tmp_path, sim):
    script = tmp_path / "notebook.py"
    script.write_text(SCRIPT)
    env = dict(sim, PYTHONPATH=os.path.join(gstest.SRCDIR, "tests", "simcuda"))
    r = subprocess.run([sys.executable, MINI, str(script)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 7 and "cells 3" in r.stdout, (r.stdout, r.stderr)
