"""Notebook names with the plain launcher (issue 35, item 2): a notebook 6
server does not tell a kernel its notebook, so the launcher's watcher asks
the server that started it (its runtime file, api/sessions); a kernel that
nbclient runs is a session of its own, named by its connection file, and
`jupyter nbconvert --execute NOTEBOOK` names it by the notebook on its
command line.  The holder keeps the GPU in a cell that waits for a file
the test creates: nothing here waits for a time to pass."""
import json
import os
import subprocess

import pytest

import gstest
from gstest import held_cell, wait_until
from test_notebook_ext import GPU_CELL, GPU_INIT, Recording, text

# Exclusive, with a quantum longer than the test: a notebook keeps the GPU
# until its cell ends.
pytestmark = pytest.mark.broker("--policy", "exclusive", "--tq", "3600")


@pytest.fixture
def plain(tmp_path, sim):
    """The Shared GPU kernelspec with the plain launcher: its kernels
    directory."""
    kernels = gstest.install_kernelspec(tmp_path / "prefix", sim, "--no-provisioner")
    with open(os.path.join(kernels, "shared-gpu", "kernel.json")) as f:
        assert "kernel_provisioner" not in json.load(f)["metadata"]
    return kernels


def jupyter_env(broker, tmp_path):
    return gstest.jupyter_env(broker.env, tmp_path, GPUSHARE_IDLE_RELEASE_MS=0)


def test_notebook6_names_the_holder_in_status_and_wait_line(tmp_path, broker, kenv, plain):
    gstest.become_subreaper()
    server = gstest.NotebookServer(tmp_path, jupyter_env(broker, tmp_path))
    flag = tmp_path / "release"
    ch = run = None
    try:
        (server.tmp / "notebooks" / "work").mkdir()
        _, kid, s = gstest.open_notebook(server, "work/train.ipynb", broker)
        listing = broker.cli("status").stdout
        assert any(kid[:8] in line and "work/train.ipynb" in line
                   for line in listing.splitlines()), listing

        # It holds the GPU; a notebook that nbclient runs waits, and says for whom.
        ch = gstest.KernelChannel("ws://127.0.0.1:%d/api/kernels/%s/channels"
                                  % (server.port, kid), server.token)
        held = ch.execute(held_cell(flag, GPU_INIT))
        wait_until(lambda: broker.sessions()[kid]["state"] == "running",
                   what="train.ipynb holding the GPU")
        run = Recording(tmp_path, plain, kenv, [GPU_CELL])
        first = wait_until(lambda: run.of_type("display_data"), timeout=120,
                           what="the wait line")[0]
        who = "held by %s's notebook train.ipynb for at most " % s["user"]
        assert who in text(first), text(first)
        # The nbclient kernel is a session of its own, named by its
        # connection file (no server: no notebook name).
        others = [o for i, o in broker.sessions().items() if i != kid]
        assert len(others) == 1 and others[0]["state"] == "waiting", others
        assert others[0]["kernel_id"] == others[0]["id"] and not others[0]["notebook"], others
    finally:
        flag.touch()
        try:
            if ch is not None:
                assert ch.reply(held)[0]["status"] == "ok"
            if run is not None:
                run.join()
                last = text(run.of_type("update_display_data")[-1])
                assert "s for the GPU: held by %s's notebook train.ipynb" % s["user"] in last, last
        finally:
            server.stop()
            gstest.kill_strays(keep=[broker.proc.pid])


def test_nbconvert_names_its_kernel_by_the_notebook(tmp_path, broker, plain):
    import nbformat
    flag = tmp_path / "release"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(held_cell(flag))])
    nbformat.write(nb, str(tmp_path / "report.ipynb"))
    env = jupyter_env(broker, tmp_path)
    p = subprocess.Popen([gstest.PYTHON, "-m", "nbconvert", "--to", "notebook", "--execute",
                          "report.ipynb", "--output", "report-run.ipynb",
                          "--ExecutePreprocessor.kernel_name=shared-gpu"],
                         cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        s = wait_until(lambda: [s for s in broker.sessions().values()
                                if s["notebook"] == "report.ipynb"],
                       timeout=120, what="the kernel named by its notebook")[0]
        assert s["kind"] == "notebook" and s["kernel_id"] == s["id"], s
    finally:
        flag.touch()
        out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
