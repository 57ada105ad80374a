"""Real kernels (Debian's ipykernel) started through the installed Shared
GPU kernelspec by jupyter_client's MultiKernelManager, as a notebook server
starts them, with a real broker on the simulated GPU: sessions and cells in
`gpushare status`, interrupt, restart, shutdown, kill -9, a missing broker,
and nbclient running the example notebook.  A cell that must stay busy
while the test looks waits for a file the test creates (gstest.held_cell),
and a cell says on its output where it is, instead of the test sleeping."""
import os
import signal

import pytest

import gstest
from gstest import (Kernels, await_output, held_cell, kernel_pid, orphan_watchers, pid_gone,
                    wait_until, watchers_of)

GPU_CELL = ("import gpusim\n"
            "gpusim.init()\n"
            "gpusim.launch(us=2000)\n"
            "gpusim.synchronize()\n"
            "print(gpusim.busy_ns() >= 2000000)")


@pytest.fixture
def kernels(tmp_path, sim):
    ks = Kernels(tmp_path, gstest.install_kernelspec(tmp_path / "prefix", sim))
    yield ks
    ks.close()


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def cell_state(broker, kid):
    s = broker.sessions().get(kid)
    return s and s["cell"]


def test_two_kernels_sessions_and_cells(kernels, broker, kenv):
    a, km_a, kc_a = kernels.start(dict(kenv, JUPYTERHUB_USER="alice", JPY_SESSION_NAME="a.ipynb"))
    b, km_b, kc_b = kernels.start(dict(kenv, JUPYTERHUB_USER="bob", JPY_SESSION_NAME="b.ipynb"))
    for kc in (kc_a, kc_b):
        content, out, _ = gstest.run_cell(kc, GPU_CELL)
        assert content["status"] == "ok", content
        assert out.strip() == "True"
    ss = broker.sessions()
    # alice and bob are what the launchers claim; the account is the test's
    assert ss[a]["kernel_id"] == a and ss[a]["claimed_user"] == "alice" and \
        ss[a]["notebook"] == "a.ipynb"
    assert ss[b]["kernel_id"] == b and ss[b]["claimed_user"] == "bob" and \
        ss[b]["notebook"] == "b.ipynb"
    # The hooks inside the kernels joined their notebooks' sessions.
    assert kernel_pid(km_a) in ss[a]["pids"] and kernel_pid(km_b) in ss[b]["pids"]
    assert ss[a]["grants"] >= 1 and ss[b]["grants"] >= 1
    # A running cell is busy, the other notebook idle; both idle afterwards.
    flag = kernels.tmp_path / "cell-done"
    msg_id = kc_a.execute(held_cell(flag))
    wait_until(lambda: cell_state(broker, a) == "busy", what="cell busy")
    assert cell_state(broker, b) == "idle"
    flag.touch()
    reply = kc_a.get_shell_msg(timeout=120)
    assert reply["parent_header"]["msg_id"] == msg_id
    wait_until(lambda: cell_state(broker, a) == "idle", what="cell idle")


def test_interrupt_reaches_the_kernel_once_and_everything_survives(kernels, broker, kenv):
    kid, km, kc = kernels.start(kenv)
    pid = kernel_pid(km)
    (watcher,) = wait_until(lambda: watchers_of(pid), what="the watcher")
    # A cell that counts the SIGINTs it gets.  The interrupt is a SIGINT to
    # the kernel's process group (jupyter_client's killpg): only the kernel
    # is in it (the watcher has a group of its own), so one SIGINT is all
    # it can get; the cell reports the count once the test has seen that.
    flag = kernels.tmp_path / "counted"
    counting = ("import os, signal, time\n"
                "hits = []\n"
                "signal.signal(signal.SIGINT, lambda s, f: hits.append(s))\n"
                "print('armed', flush=True)\n"
                "while not hits: time.sleep(0.01)\n"
                "print('hit', flush=True)\n"
                "while not os.path.exists(%r): time.sleep(0.01)\n"
                "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                "print('hits', len(hits))" % str(flag))
    msg_id = kc.execute(counting)
    wait_until(lambda: cell_state(broker, kid) == "busy", what="cell busy")
    await_output(kc, msg_id, "armed")
    km.interrupt_kernel()
    await_output(kc, msg_id, "hit")
    group = [p for p in map(int, filter(str.isdigit, os.listdir("/proc")))
             if not pid_gone(p) and _pgid(p) == os.getpgid(pid)]
    assert group == [pid], "others in the kernel's process group: %s" % group
    assert os.getpgid(watcher) != os.getpgid(pid)
    flag.touch()
    reply = kc.get_shell_msg(timeout=120)
    assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["status"] == "ok"
    assert "hits 1" in await_output(kc, msg_id, "hits")
    # A loop of simulated GPU launches, interrupted: KeyboardInterrupt.
    loop = ("import gpusim\n"
            "gpusim.init()\n"
            "gpusim.launch(us=1000)\n"
            "gpusim.synchronize()\n"
            "print('looping', flush=True)\n"
            "while True:\n"
            "    gpusim.launch(us=1000)\n"
            "    gpusim.synchronize()\n")
    msg_id = kc.execute(loop)
    wait_until(lambda: cell_state(broker, kid) == "busy", what="cell busy")
    await_output(kc, msg_id, "looping")
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=120)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    wait_until(lambda: cell_state(broker, kid) == "idle", what="cell idle after interrupt")
    # Kernel, watcher and cell tracking all still there.
    assert km.is_alive() and kernel_pid(km) == pid
    assert watchers_of(pid) == [watcher]
    flag = kernels.tmp_path / "next-done"
    msg_id = kc.execute(held_cell(flag))
    wait_until(lambda: cell_state(broker, kid) == "busy", what="next cell busy")
    flag.touch()
    assert kc.get_shell_msg(timeout=120)["parent_header"]["msg_id"] == msg_id
    content, out, _ = gstest.run_cell(kc, GPU_CELL)
    assert content["status"] == "ok" and out.strip() == "True"


def test_restart_registers_again_and_leaves_no_watcher(kernels, broker, kenv):
    before = set(orphan_watchers())
    kid, km, kc = kernels.start(kenv)
    old_pid = kernel_pid(km)
    (old_watcher,) = wait_until(lambda: watchers_of(old_pid), what="the watcher")
    wait_until(lambda: kid in broker.sessions(), what="registered")
    kc = kernels.clients[kid] = gstest.restart_kernel(km, kc)
    new_pid = kernel_pid(km)
    assert new_pid != old_pid
    wait_until(lambda: pid_gone(old_watcher), what="the old watcher to exit")
    (new_watcher,) = wait_until(lambda: watchers_of(new_pid), what="the new watcher")
    assert "kernel pid %d" % new_pid in wait_until(
        lambda: "kernel pid %d" % new_pid in broker.log() and broker.log(), what="re-register")
    wait_until(lambda: kid in broker.sessions(), what="registered again")
    content, out, _ = gstest.run_cell(kc, GPU_CELL)
    assert content["status"] == "ok" and out.strip() == "True"
    assert kernel_pid(km) in broker.sessions()[kid]["pids"]
    assert orphan_watchers(before) == []


def test_shutdown_is_graceful_and_unregisters(kernels, broker, kenv):
    from jupyter_client.manager import _ShutdownStatus
    kid, km, kc = kernels.start(kenv)
    pid = kernel_pid(km)
    (watcher,) = wait_until(lambda: watchers_of(pid), what="the watcher")
    wait_until(lambda: kid in broker.sessions(), what="registered")
    # The kernel exits on the shutdown request: no SIGTERM was needed (a
    # watcher in the kernel's process group would hold ipykernel's
    # shutdown).  jupyter_client sends SIGTERM only after waiting
    # shutdown_wait_time for the exit: long, so that a slow machine cannot
    # be taken for a kernel that does not exit.
    km.shutdown_wait_time = 120
    kernels.mkm.shutdown_kernel(kid)
    assert km._shutdown_status == _ShutdownStatus.ShutdownRequest, km._shutdown_status
    wait_until(lambda: pid_gone(watcher), what="the watcher to exit")
    wait_until(lambda: kid not in broker.sessions(), what="the session to go")


def test_kill_9_of_the_kernel_ends_watcher_and_session(kernels, broker, kenv):
    kid, km, kc = kernels.start(kenv)
    pid = kernel_pid(km)
    (watcher,) = wait_until(lambda: watchers_of(pid), what="the watcher")
    wait_until(lambda: kid in broker.sessions(), what="registered")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not km.is_alive(), what="the kernel to die")
    wait_until(lambda: pid_gone(watcher), what="the watcher to exit")
    # PDEATHSIG let the watcher unregister: the broker forgets the session
    # without waiting for its liveness checks.
    wait_until(lambda: kid not in broker.sessions(), what="the session to go")


def test_kernel_works_without_a_broker_with_one_warning(kernels, sim, tmp_path):
    # GPUSHARE_LOG=debug: the watcher says each failed attempt after the
    # first, so the test sees the retries it waits for.
    env = dict(sim, GPUSHARE_BROKER="ipc://%s" % (tmp_path / "nobroker.sock"),
               GPUSHARE_LOG="debug")
    kid, km, kc = kernels.start(env)
    content, out, _ = gstest.run_cell(kc, "print('works')")
    assert content["status"] == "ok" and out.strip() == "works"
    wait_until(lambda: "broker attempt 3 failed" in kernels.log(kid), what="three retries")
    log = kernels.log(kid)
    lines = [l for l in log.splitlines() if l.startswith("gpushare-launch") and
             (": warn: " in l or ": error: " in l)]  # what it says at its default level
    assert len(lines) == 1, log
    assert "warn: no gpushare broker" in lines[0] and "nobroker.sock" in lines[0]
    assert watchers_of(kernel_pid(km))  # still retrying in the background


@pytest.mark.sim(extra=gstest.EXAMPLE_POOL)
def test_nbclient_runs_the_example_notebook_with_the_broker(tmp_path, broker, kenv):
    """examples/hello-shared-gpu.ipynb through nbclient; the broker saw the
    kernel register, run cells and go."""
    seen = []

    def on_cell_executed(**kw):
        seen.append(broker.sessions())

    kernels_dir = gstest.install_kernelspec(tmp_path / "prefix", kenv)
    text = gstest.run_example_notebook(tmp_path, kernels_dir, kenv, now=False,
                                       on_cell_executed=on_cell_executed)
    assert "backend: simulated" in text
    # nbclient's KernelManager writes a temporary connection file: the kernel
    # id the broker knows is that file's name.
    assert any(len(s) == 1 and list(s.values())[0]["grants"] >= 1 for s in seen), seen
    assert "registered: user" in broker.log()
    wait_until(lambda: "unregistered" in broker.log(), what="unregister")
