"""Real kernels (Debian's ipykernel) started through the installed Shared
GPU kernelspec by jupyter_client's MultiKernelManager, as a notebook server
starts them, with a real broker on the simulated GPU: sessions and cells in
`gpushare status`, interrupt, restart, shutdown, kill -9, a missing broker,
and nbclient running the example notebook."""
import os
import signal
import time

import pytest

import gstest
from gstest import Kernels, kernel_pid, orphan_watchers, pid_gone, wait_until, watchers_of

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
    assert ss[a]["kernel_id"] == a and ss[a]["user"] == "alice" and ss[a]["notebook"] == "a.ipynb"
    assert ss[b]["kernel_id"] == b and ss[b]["user"] == "bob" and ss[b]["notebook"] == "b.ipynb"
    # The hooks inside the kernels joined their notebooks' sessions.
    assert kernel_pid(km_a) in ss[a]["pids"] and kernel_pid(km_b) in ss[b]["pids"]
    assert ss[a]["grants"] >= 1 and ss[b]["grants"] >= 1
    # A running cell is busy, the other notebook idle; both idle afterwards.
    msg_id = kc_a.execute("import time; time.sleep(1.5)")
    wait_until(lambda: cell_state(broker, a) == "busy", what="cell busy")
    assert cell_state(broker, b) == "idle"
    reply = kc_a.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    wait_until(lambda: cell_state(broker, a) == "idle", what="cell idle")


def test_interrupt_reaches_the_kernel_once_and_everything_survives(kernels, broker, kenv):
    kid, km, kc = kernels.start(kenv)
    pid = kernel_pid(km)
    (watcher,) = wait_until(lambda: watchers_of(pid), what="the watcher")
    # A cell that counts the SIGINTs it gets, and waits for a second one.
    counting = ("import signal, time\n"
                "hits = []\n"
                "signal.signal(signal.SIGINT, lambda s, f: hits.append(s))\n"
                "print('armed', flush=True)\n"
                "while not hits: time.sleep(0.01)\n"
                "time.sleep(0.5)\n"
                "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                "print('hits', len(hits))")
    outputs = []
    msg_id = kc.execute(counting)
    wait_until(lambda: cell_state(broker, kid) == "busy", what="cell busy")
    while not any("armed" in o for o in outputs):
        m = kc.get_iopub_msg(timeout=30)
        if m["msg_type"] == "stream":
            outputs.append(m["content"]["text"])
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["status"] == "ok"
    while True:
        m = kc.get_iopub_msg(timeout=30)
        if m["msg_type"] == "stream":
            outputs.append(m["content"]["text"])
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" and \
                m["parent_header"].get("msg_id") == msg_id:
            break
    assert "hits 1" in "".join(outputs)
    # A loop of simulated GPU launches, interrupted: KeyboardInterrupt.
    loop = ("import gpusim\n"
            "gpusim.init()\n"
            "while True:\n"
            "    gpusim.launch(us=1000)\n"
            "    gpusim.synchronize()\n")
    msg_id = kc.execute(loop)
    wait_until(lambda: cell_state(broker, kid) == "busy", what="cell busy")
    time.sleep(0.3)
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    wait_until(lambda: cell_state(broker, kid) == "idle", what="cell idle after interrupt")
    # Kernel, watcher and cell tracking all still there.
    assert km.is_alive() and kernel_pid(km) == pid
    assert watchers_of(pid) == [watcher]
    msg_id = kc.execute("import time; time.sleep(1)")
    wait_until(lambda: cell_state(broker, kid) == "busy", what="next cell busy")
    kc.get_shell_msg(timeout=30)
    content, out, _ = gstest.run_cell(kc, GPU_CELL)
    assert content["status"] == "ok" and out.strip() == "True"


def test_restart_registers_again_and_leaves_no_watcher(kernels, broker, kenv):
    before = set(orphan_watchers())
    kid, km, kc = kernels.start(kenv)
    old_pid = kernel_pid(km)
    (old_watcher,) = wait_until(lambda: watchers_of(old_pid), what="the watcher")
    wait_until(lambda: kid in broker.sessions(), what="registered")
    km.restart_kernel()
    kc.wait_for_ready(timeout=60)
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
    t0 = time.monotonic()
    kernels.mkm.shutdown_kernel(kid)
    took = time.monotonic() - t0
    # The kernel exits on the shutdown request: no SIGTERM was needed (a
    # watcher in the kernel's process group would hold ipykernel's shutdown).
    assert km._shutdown_status == _ShutdownStatus.ShutdownRequest, km._shutdown_status
    assert took < 2.0
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
    env = dict(sim, GPUSHARE_BROKER="ipc://%s" % (tmp_path / "nobroker.sock"))
    env.pop("GPUSHARE_LOG", None)
    kid, km, kc = kernels.start(env)
    content, out, _ = gstest.run_cell(kc, "print('works')")
    assert content["status"] == "ok" and out.strip() == "works"
    time.sleep(1.0)  # several background retries
    log = kernels.log(kid)
    lines = [l for l in log.splitlines() if l.startswith("gpushare-launch")]
    assert len(lines) == 1, log
    assert "warn: no gpushare broker" in lines[0] and "nobroker.sock" in lines[0]
    assert watchers_of(kernel_pid(km))  # still retrying in the background


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
