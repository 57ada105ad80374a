"""gpushare_provisioner (kernelspecs/provisioner/): found through its entry
point from the build tree's kernelspecs/pythonpath (what `make` lays out)
and from a `make install` / `pip install` into a temporary prefix; kernels
started through the `--provisioner` kernelspec carry the kernel id and the
user, are registered on start and restart and unregistered on shutdown and
kill; a missing or hanging broker never holds the server up for long."""
import asyncio
import configparser
import json
import logging
import os
import shutil
import subprocess
import sys

import pytest

import gstest
from gstest import PROVISIONER_PATH, kernel_pid, pid_gone, wait_until, watchers_of
from fakebroker import FakeBroker

sys.path.insert(0, PROVISIONER_PATH)

import gpushare_provisioner  # noqa: E402  (from the build tree)
from gpushare_provisioner import BrokerClient, BrokerError, broker_endpoint  # noqa: E402

SRC = os.path.join(gstest.SRCDIR, "kernelspecs", "provisioner")
ENTRY = "gpushare-provisioner = gpushare_provisioner:GpushareProvisioner"


def version():
    return subprocess.run([gstest.LAUNCH, "--version"], capture_output=True, text=True,
                          check=True).stdout.split()[-1]


def test_package_version_and_entry_point_agree():
    assert gpushare_provisioner.__version__ == version()
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(SRC, "setup.cfg"))
    group = cfg["options.entry_points"]["jupyter_client.kernel_provisioners"].strip()
    assert group == ENTRY
    dist = os.path.join(PROVISIONER_PATH, "gpushare_provisioner-%s.dist-info" % version())
    with open(os.path.join(dist, "entry_points.txt")) as f:
        assert f.read().split("\n")[:2] == ["[jupyter_client.kernel_provisioners]", ENTRY]


def test_jupyter_client_finds_the_provisioner():
    from jupyter_client.provisioning import KernelProvisionerFactory
    kpf = KernelProvisionerFactory.instance()
    assert kpf._check_availability("gpushare-provisioner")
    cls = kpf.provisioners["gpushare-provisioner"].load()
    assert cls is gpushare_provisioner.GpushareProvisioner
    from jupyter_client.provisioning import LocalProvisioner
    assert issubclass(cls, LocalProvisioner)


def list_specs(prefix, pythonpath):
    env = dict(os.environ, JUPYTER_PATH=str(prefix / "share" / "jupyter"),
               PYTHONPATH=pythonpath)
    r = subprocess.run([gstest.PYTHON, "-m", "jupyter_client.kernelspecapp", "list", "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["kernelspecs"], r.stderr


def with_provisioner(env):
    """env with the build tree's provisioner on the path, as a python that
    has it installed."""
    return dict(env, PYTHONPATH=os.pathsep.join([PROVISIONER_PATH, env.get("PYTHONPATH", "")]))


def ks(prefix, env, *args):
    """`gpushare kernelspec ARGS` with the build tree's launcher."""
    if args[0] == "install":
        args = args + ("--prefix", str(prefix), "--launcher", gstest.LAUNCH)
    return subprocess.run([gstest.CLI, "kernelspec"] + list(args), capture_output=True, text=True,
                          timeout=60, env=dict(env, JUPYTER_PATH=str(prefix / "share/jupyter")))


def spec_json(prefix, name):
    with open(prefix / "share/jupyter/kernels" / name / "kernel.json") as f:
        return json.load(f)


def test_install_uses_the_provisioner_when_jupyter_can_load_it(tmp_path, sim):
    # It can: the provisioner, and said so.
    r = ks(tmp_path, with_provisioner(sim), "install")
    assert r.returncode == 0, r.stderr
    assert "through the gpushare provisioner: the broker knows each by the id Jupyter gives " \
           "it" in r.stdout
    assert spec_json(tmp_path, "shared-gpu")["metadata"]["kernel_provisioner"][
        "provisioner_name"] == "gpushare-provisioner"
    specs, _ = list_specs(tmp_path, PROVISIONER_PATH)
    assert "shared-gpu" in specs
    # It cannot: the plain launcher, and why.
    r = ks(tmp_path, sim, "install", "--name", "plain")
    assert r.returncode == 0, r.stderr
    assert "through the plain launcher, as %s cannot load the gpushare provisioner (the " \
           "gpushare provisioner is not installed for %s)" % (gstest.PYTHON, gstest.PYTHON) \
           in r.stdout
    assert "kernel_provisioner" not in spec_json(tmp_path, "plain")["metadata"]
    # --provisioner insists: no spec that Jupyter would hide.
    r = ks(tmp_path, sim, "install", "--name", "hidden", "--provisioner")
    assert r.returncode == 1
    assert "--provisioner: the gpushare provisioner is not installed for %s; Jupyter would " \
           "hide this kernel" % gstest.PYTHON in r.stderr
    assert not (tmp_path / "share/jupyter/kernels/hidden").exists()
    # --no-provisioner insists on the plain launcher.
    r = ks(tmp_path, with_provisioner(sim), "install", "--name", "plain2", "--no-provisioner")
    assert r.returncode == 0 and "(--no-provisioner)" in r.stdout
    assert "kernel_provisioner" not in spec_json(tmp_path, "plain2")["metadata"]

    # `kernelspec list` says which each uses; Jupyter lists the plain ones anyway...
    specs, err = list_specs(tmp_path, "")
    assert {"plain", "plain2"} <= set(specs)
    # ... and hides the provisioner's once it cannot load it: list says so.
    assert "shared-gpu" not in specs and "gpushare-provisioner" in err
    r = ks(tmp_path, sim, "list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STARTS", "KERNELS", "DIRECTORY"]
    rows = {ln.split()[0]: ln for ln in lines[1:] if ln and not ln.startswith(" ")}
    assert rows["plain"].split()[1:3] == ["plain", "launcher"]
    assert rows["shared-gpu"].split()[1] == "provisioner"
    assert rows["shared-gpu"].split()[2] == str(tmp_path / "share/jupyter/kernels/shared-gpu")
    hidden = lines[lines.index(rows["shared-gpu"]) + 1]
    assert hidden.strip() == "HIDDEN by Jupyter: the gpushare provisioner is not installed " \
                             "for %s" % gstest.PYTHON
    r = ks(tmp_path, with_provisioner(sim), "list")
    assert "HIDDEN" not in r.stdout and "shared-gpu" in r.stdout


def provisioner_spec(tmp_path, env, *launcher_args):
    """The --provisioner spec; launcher_args go before the launcher's --."""
    kernels = gstest.install_kernelspec(tmp_path / "prefix", with_provisioner(env),
                                        "--provisioner")
    path = os.path.join(kernels, "shared-gpu", "kernel.json")
    with open(path) as f:
        ks = json.load(f)
    ks["argv"][1:1] = list(launcher_args)
    with open(path, "w") as f:
        json.dump(ks, f)
    return kernels


def test_kernel_gets_id_and_user_and_is_registered(tmp_path, broker, kenv):
    kernels = provisioner_spec(tmp_path, kenv)
    env = dict(kenv, JUPYTERHUB_USER="carol", JPY_SESSION_NAME="dir/nb.ipynb")
    km, kc = gstest.start_kernel(kernels, env)
    try:
        assert type(km.provisioner).__name__ == "GpushareProvisioner"
        kid = km.kernel_id
        # A plain KernelManager writes a temporary connection file; the kernel
        # id still reaches the launcher and the hook through the environment.
        assert "kernel-%s" % kid not in km.connection_file
        code = ("import os; print(os.environ['GPUSHARE_KERNEL_ID'], os.environ['GPUSHARE_SESSION'],"
                " os.environ['GPUSHARE_USER'])")
        content, out, _ = gstest.run_cell(kc, code)
        assert out.split() == [kid, kid, "carol"]
        s = broker.sessions()[kid]
        assert (s["claimed_user"], s["notebook"], s["kernel_id"]) == ("carol", "dir/nb.ipynb", kid)
        content, out, _ = gstest.run_cell(kc, "import gpusim; gpusim.init(); gpusim.launch(us=500);"
                                              " gpusim.synchronize(); print('ok')")
        assert out.strip() == "ok"
        assert kernel_pid(km) in broker.sessions()[kid]["pids"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
    wait_until(lambda: kid not in broker.sessions(), what="unregistered")


def test_provisioner_alone_registers_restarts_and_unregisters(tmp_path, broker, kenv):
    """With the launcher's watcher off, the registrations the broker sees are
    the provisioner's: on start, again on restart, and gone on a kill."""
    kernels = provisioner_spec(tmp_path, kenv, "--no-watch")
    km, kc = gstest.start_kernel(kernels, kenv)
    try:
        kid = km.kernel_id
        pid = kernel_pid(km)
        assert watchers_of(pid) == []
        assert kid in broker.sessions()
        assert "kernel pid %d" % pid in broker.log()
        # No notebook server in this process: no session table to look the
        # notebook up in, so no task polling one (it would outlive its loop).
        assert km.provisioner._path_task is None
        kc = gstest.restart_kernel(km, kc)
        new_pid = kernel_pid(km)
        assert "kernel pid %d" % new_pid in broker.log()
        assert kid in broker.sessions()
        km.shutdown_kernel(now=True)  # SIGKILL to the kernel's process group
        assert kid not in broker.sessions()
        assert pid_gone(new_pid)
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)


def test_restart_and_kill_with_watcher_and_provisioner(tmp_path, broker, kenv):
    kernels = provisioner_spec(tmp_path, kenv)
    km, kc = gstest.start_kernel(kernels, kenv)
    try:
        kid = km.kernel_id
        (w,) = wait_until(lambda: watchers_of(kernel_pid(km)), what="the watcher")
        kc = gstest.restart_kernel(km, kc)
        wait_until(lambda: pid_gone(w), what="the old watcher to go")
        (w,) = wait_until(lambda: watchers_of(kernel_pid(km)), what="the new watcher")
        wait_until(lambda: kid in broker.sessions(), what="registered after restart")
        flag = tmp_path / "cell-done"
        msg = kc.execute(gstest.held_cell(flag))
        wait_until(lambda: broker.sessions()[kid]["cell"] == "busy", what="cell busy")
        flag.touch()
        assert kc.get_shell_msg(timeout=120)["parent_header"]["msg_id"] == msg
        km.shutdown_kernel(now=True)
        assert kid not in broker.sessions()
        wait_until(lambda: pid_gone(w), what="the watcher to go")
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)


@pytest.mark.sim(extra=gstest.EXAMPLE_POOL)
def test_nbclient_kernel_is_known_by_its_kernel_id(tmp_path, broker, kenv):
    """nbclient (and papermill) start the kernel with a plain KernelManager,
    whose connection file has a temporary name: through the spec that
    `kernelspec install` writes where the provisioner loads, the broker
    knows the kernel by the id Jupyter gave it, from every registrar."""
    kernels = gstest.install_kernelspec(tmp_path / "prefix", with_provisioner(kenv))
    ids = []
    text = gstest.run_example_notebook(tmp_path, kernels, kenv, kernel_ids=ids)
    assert "backend: simulated" in text
    (kid,) = ids
    registers = broker.synced_events("register")
    assert registers and {e["session"] for e in registers} == {kid}, registers
    joins = broker.events("join")
    assert joins and {e["session"] for e in joins} == {kid}, joins


def test_notebook_server_kernel_id_and_notebook_path(tmp_path, broker, sim):
    """A notebook server (notebook 6, which does not tell a kernel its
    notebook): the session is the server's kernel id, and the notebook's
    path comes from the server's session table."""
    gstest.become_subreaper()
    gstest.install_kernelspec(tmp_path / "prefix", with_provisioner(sim))
    server = gstest.NotebookServer(tmp_path, gstest.jupyter_env(with_provisioner(broker.env),
                                                                tmp_path))
    try:
        (server.tmp / "notebooks" / "work").mkdir()
        sid, kid, _ = gstest.open_notebook(server, "work/train.ipynb", broker)
        # It stays when the launcher's watcher registers (without a path).
        wait_until(lambda: len(broker.synced_events("register")) >= 3, what="three registers")
        assert broker.sessions()[kid]["notebook"] == "work/train.ipynb"
        assert server.api("DELETE", "/api/sessions/" + sid).status_code == 204
        wait_until(lambda: kid not in broker.sessions(), what="unregistered")
    finally:
        server.stop()
        gstest.kill_strays(keep=[broker.proc.pid])


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_missing_broker_costs_one_warning_and_no_wait(tmp_path, sim, monkeypatch):
    # The warning is once per server process, and an earlier test of this
    # process may have spent it: a busy machine answers a register later
    # than the 0.5 s broker_timeout, which is "no broker" too.
    monkeypatch.setattr(gpushare_provisioner.GpushareProvisioner, "_warned", False)
    env = dict(sim, GPUSHARE_BROKER="ipc://%s" % (tmp_path / "none.sock"))
    kernels = provisioner_spec(tmp_path, env)
    cap = Capture()
    from traitlets.log import get_logger
    get_logger().addHandler(cap)
    try:
        km, kc = gstest.start_kernel(kernels, env)
        try:
            kc = gstest.restart_kernel(km, kc)
            content, out, _ = gstest.run_cell(kc, "print('works')")
            assert out.strip() == "works"
        finally:
            kc.stop_channels()
            km.shutdown_kernel()
    finally:
        get_logger().removeHandler(cap)
    warnings = [r.getMessage() for r in cap.records
                if r.levelno >= logging.WARNING and "gpushare" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "no broker" in warnings[0] and "none.sock" in warnings[0]


def test_broker_client_deadlines(tmp_path):
    def call(endpoint, timeout):
        return BrokerClient(endpoint, timeout=timeout).register("k1", "u", 1)

    # No socket: "unavailable" before the coroutine waits for anything at
    # all (it raises on its first step, never handing the loop a wait).
    with pytest.raises(BrokerError) as e:
        call("ipc://%s" % (tmp_path / "absent.sock"), 0.5).send(None)
    assert e.value.code == "unavailable"
    # A broker that never answers: "timeout" at the deadline, exactly, on a
    # virtual clock (it jumps to the next timer whenever nothing is ready).
    hung = FakeBroker("ipc://%s" % (tmp_path / "hung.sock"), welcome=False).start()
    loop = gstest.VirtualClockLoop()
    try:
        async def timed():
            c = BrokerClient(hung.endpoint, timeout=0.5)
            t0 = loop.time()
            try:
                await c.register("k1", "u", 1)
            except BrokerError as e:
                return e.code, loop.time() - t0
            finally:
                c.close()
        code, took = loop.run_until_complete(timed())
        assert code == "timeout" and took == pytest.approx(0.5), (code, took)
    finally:
        loop.close()
        hung.stop()
    ok = FakeBroker("ipc://%s" % (tmp_path / "ok.sock")).start()
    try:
        c = BrokerClient(ok.endpoint, timeout=30)
        try:
            assert asyncio.run(c.register("k1", "u", 1)) == "k1"
        finally:
            c.close()
        reg = ok.wait_for("register")["msg"]
        assert (reg["kernel_id"], reg["user"], reg["pid"]) == ("k1", "u", 1)
        assert ok.wait_for("hello")["msg"]["role"] == "provisioner"
    finally:
        ok.stop()


def test_broker_endpoint_rule(tmp_path):
    assert broker_endpoint({"GPUSHARE_BROKER": "/x/b.sock"}) == "ipc:///x/b.sock"
    with pytest.raises(ValueError, match="tcp:// is not supported"):
        broker_endpoint({"GPUSHARE_BROKER": "tcp://h:1"})
    os.chmod(tmp_path, 0o700)
    (tmp_path / "gpushare").mkdir(mode=0o700)
    assert broker_endpoint({"XDG_RUNTIME_DIR": str(tmp_path)}) == \
        "ipc:///run/gpushare/broker.sock"
    (tmp_path / "gpushare" / "broker.sock").write_text("")
    assert broker_endpoint({"XDG_RUNTIME_DIR": str(tmp_path)}) == \
        "ipc://%s/gpushare/broker.sock" % tmp_path
    # A per-user directory that is not private is passed over, with a note.
    os.chmod(tmp_path / "gpushare", 0o777)
    notes = []
    assert broker_endpoint({"XDG_RUNTIME_DIR": str(tmp_path)}, notes) == \
        "ipc:///run/gpushare/broker.sock"
    assert len(notes) == 1 and "writable by others (mode 0777)" in notes[0], notes
    with pytest.raises(ValueError):
        broker_endpoint({"GPUSHARE_BROKER": "udp://x"})


def entry_point_seen_by(pythonpath):
    code = ("from jupyter_client.provisioning import KernelProvisionerFactory as F\n"
            "f = F.instance()\n"
            "print(f._check_availability('gpushare-provisioner'),"
            " f.provisioners['gpushare-provisioner'].load().__module__,"
            " __import__('gpushare_provisioner').__file__)")
    r = subprocess.run([gstest.PYTHON, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=pythonpath))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_make_install_and_uninstall_into_a_prefix(tmp_path):
    dest = tmp_path / "dest"
    make = ["make", "-s", "-C", os.path.join(gstest.BUILDDIR, "kernelspecs"),
            "DESTDIR=%s" % dest, "prefix=/opt/gs"]
    r = subprocess.run(make + ["install"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    sitedir = subprocess.run([gstest.PYTHON, os.path.join(SRC, "sitedir.py"), "/opt/gs"],
                             capture_output=True, text=True, check=True).stdout.strip()
    installed = str(dest) + sitedir
    names = sorted(os.listdir(installed))
    # with the IPython extension the kernelspec loads, in the same place
    assert names == ["gpushare_ipython", "gpushare_provisioner",
                     "gpushare_provisioner-%s.dist-info" % version()]
    assert "waitline.py" in os.listdir(os.path.join(installed, "gpushare_ipython"))
    seen = entry_point_seen_by(installed)
    assert seen[0] == "True" and seen[1] == "gpushare_provisioner.provisioner"
    assert seen[2].startswith(installed)
    assert (dest / "opt/gs/share/jupyter/kernels/shared-gpu/kernel.json").exists()
    # `jupyter kernelspec list` shows the spec make installed.
    specs, _ = list_specs(dest / "opt" / "gs", "")
    assert specs["shared-gpu"]["spec"]["display_name"] == "Shared GPU"
    assert specs["shared-gpu"]["spec"]["argv"][0] == "/opt/gs/bin/gpushare-launch"
    r = subprocess.run(make + ["uninstall"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    left = [os.path.join(d, f) for d, _, files in os.walk(dest) for f in files]
    assert left == []


def test_pip_installs_the_source_offline(tmp_path):
    """setup.cfg and pyproject.toml work with Debian's setuptools and pip,
    offline, from a copy (pip builds in the source tree)."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    r = subprocess.run([gstest.PYTHON, "-m", "pip", "install", "--no-build-isolation",
                        "--no-deps", "--no-index", "--disable-pip-version-check", "-q",
                        "--prefix", str(tmp_path / "prefix"), str(src)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PIP_NO_INPUT="1"))
    if r.returncode != 0 and "No module named pip" in r.stderr:
        pytest.skip("pip is not installed")
    assert r.returncode == 0, r.stderr
    sites = [d for d, dirs, _ in os.walk(tmp_path / "prefix") if "gpushare_provisioner" in dirs]
    assert len(sites) == 1
    seen = entry_point_seen_by(sites[0])
    assert seen[0] == "True" and seen[2].startswith(sites[0])
