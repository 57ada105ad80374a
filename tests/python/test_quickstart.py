"""The README's first command, minus the package install and the build:
install into a staging root, then run-demo.sh brings up the broker and a
Jupyter Notebook server that offers the Shared GPU kernel, on the
simulated GPU, and says that it is simulated; the example notebook runs
there as a user runs it (its cells through the server, in the kernel the
server starts with run-demo.sh's environment); a second shell of the same
user, given only the PATH and MANPATH lines the demo prints, reaches the
demo's broker and finds the man page; a port in use is said at once, by
quickstart.sh before it installs or builds anything."""
import json
import os
import re
import signal
import socket
import subprocess

import pytest

import gstest


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """`make install` into a prefix of its own, as quickstart.sh's ./_prefix
    (the kernelspec names its launcher there; the launcher finds the hook
    beside itself, this build being configured for another prefix)."""
    dest = tmp_path_factory.mktemp("root")
    prefix = str(dest / "prefix")
    r = subprocess.run(["make", "-s", "-C", gstest.BUILDDIR, "install", "prefix=%s" % prefix],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(prefix, "bin", "gpushare-broker"))
    assert os.path.exists(os.path.join(prefix, "share/jupyter/kernels/shared-gpu/kernel.json"))
    # The simulated driver is a test double: make install never installs it.
    assert not list(dest.rglob("libcuda*"))
    assert not list(dest.rglob("gpusim*"))
    return prefix


def user_env(tmp_path):
    """What every shell of the test's user has: its home and its runtime
    directory (as logind makes it: the user's own, 0700), where the
    per-user broker socket is (a private one: tests run side by side)."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    return {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(xdg), "LANG": "C.UTF-8",
            "PATH": os.environ["PATH"]}


def demo_env(tmp_path, sim):
    env = dict(sim, GPUSHARE_FORCE_SIM="1", **user_env(tmp_path),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"))
    # What a user's shell has: nothing of the tests' own gpusim path.
    for k in ("GPUSHARE_BROKER", "PYTHONPATH", "GPUSHARE_HOOK", "PYTEST_CURRENT_TEST"):
        env.pop(k, None)
    return env


def demo_argv(prefix, notebooks, port, *more):
    return [os.path.join(gstest.SRCDIR, "build-aux", "run-demo.sh"), "--prefix", prefix,
            "--simdir", os.path.join(gstest.BUILDDIR, "tests", "simcuda"),
            "--notebooks", str(notebooks), "--port", str(port)] + list(more)


def test_run_demo_smoke(tmp_path, sim, prefix):
    """With the per-user socket taken (a broker of the user's own runs
    there), the demo's broker listens on a socket of its own and the lines
    for another shell name it."""
    env = demo_env(tmp_path, sim)
    own = tmp_path / "xdg" / "gpushare" / "broker.sock"
    users = gstest.Proc([os.path.join(prefix, "bin", "gpushare-broker")], env, tmp_path,
                        "users-broker")
    try:
        gstest.wait_for_text(users.stderr, "listening on ipc://%s" % own)

        def run_demo(port):
            """run-demo.sh takes the notebook server's port up front."""
            r = subprocess.run(demo_argv(prefix, tmp_path, port, "--smoke"), capture_output=True,
                               text=True, timeout=180, env=env)
            if r.returncode != 0 and gstest.port_clash(r.stdout + r.stderr):
                raise gstest.PortInUse(r.stderr)
            return r

        r = gstest.with_ports(run_demo)
    finally:
        users.kill()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SIMULATED GPU" in r.stdout
    assert 'offers "Shared GPU"' in r.stdout
    # gpushare status (printed by the demo) says it too.
    assert "SIMULATED GPU: no NVIDIA driver is in use" in r.stdout
    assert "run-demo: the broker cannot listen where gpushare looks by default: " \
           "gpushare-broker: another broker is already listening on %s" % own in r.stderr
    demo_sock = "ipc://%s/var/run/broker.sock" % prefix
    assert "run-demo: broker listening on %s " % demo_sock in r.stdout
    assert "  export GPUSHARE_BROKER=%s\n" % demo_sock in r.stdout


def test_port_in_use_is_said_at_once(tmp_path, sim, prefix):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = subprocess.run(demo_argv(prefix, tmp_path, port), capture_output=True, text=True,
                           timeout=60, env=demo_env(tmp_path, sim))
        # quickstart.sh, before it installs, configures or builds anything.
        q = subprocess.run([os.path.join(gstest.SRCDIR, "quickstart.sh"), "--port", str(port)],
                           capture_output=True, text=True, timeout=60, env=demo_env(tmp_path, sim))
    assert r.returncode == 1
    assert "run-demo: port %d is already in use (another notebook server?); pick another with " \
           "--port N, e.g. ./quickstart.sh --port %d" % (port, port + 1) in r.stderr
    assert "broker" not in r.stdout  # nothing was started
    assert (q.returncode, q.stdout) == (1, "")
    assert q.stderr == "quickstart: port %d is already in use (another notebook server?); pick " \
                       "another with --port N, e.g. ./quickstart.sh --port %d\n" % (port, port + 1)


@pytest.mark.sim(extra=gstest.EXAMPLE_POOL)
def test_example_notebook_as_a_user_runs_it(tmp_path, sim, prefix):
    """examples/hello-shared-gpu.ipynb opened in the demo's notebook server
    with the Shared GPU kernel, its cells run one by one as the page runs
    them (over the kernel's websocket)."""
    import nbformat
    import requests

    gstest.become_subreaper()
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    nbformat.write(gstest.example_notebook(**gstest.EXAMPLE_QUICK),
                   str(notebooks / "hello-shared-gpu.ipynb"))

    def start(port):
        demo = gstest.Proc(demo_argv(prefix, notebooks, port), demo_env(tmp_path, sim), tmp_path,
                           "run-demo")
        try:
            demo.wait_line("Open http://", timeout=180)
        except AssertionError:
            demo.kill()
            if gstest.port_clash(demo.stderr()):
                raise gstest.PortInUse(demo.stderr())
            raise
        return demo

    demo = gstest.with_ports(start)
    try:
        url = demo.wait_line("Open http://").split()[1]
        base, token = re.match(r"(http://[^/]+)/\?token=(\w+)$", url).groups()
        endpoint = demo.wait_line("run-demo: broker listening on ").split()[4]
        headers = {"Authorization": "token " + token}
        r = requests.post(base + "/api/sessions", headers=headers, timeout=60, json={
            "path": "hello-shared-gpu.ipynb", "type": "notebook", "name": "",
            "kernel": {"name": "shared-gpu"}})
        assert r.status_code == 201, r.text
        kid = r.json()["kernel"]["id"]
        nb = requests.get(base + "/api/contents/hello-shared-gpu.ipynb", headers=headers,
                          timeout=60).json()["content"]
        ch = gstest.KernelChannel("ws" + base[4:] + "/api/kernels/%s/channels" % kid, token)
        try:
            out = ""
            for cell in nb["cells"]:
                if cell["cell_type"] != "code":
                    continue
                content, stdout, stderr = ch.run(cell["source"])
                assert content["status"] == "ok", (cell["source"], content, stderr)
                out += stdout
            # The kernelspec's extension (the wait line) loaded from where
            # `make install` put it.
            _, loaded, _ = ch.run("import sys; print('gpushare_ipython' in sys.modules)")
        finally:
            ch.close()
        assert loaded.strip() == "True", demo.stderr()
        assert "hook preloaded: True" in out
        assert "backend: simulated" in out
        assert "data OK: all 20 MiB read back bit-exact" in out
        # The demo's broker is where the user's tools look by default.
        assert endpoint == "ipc://%s/xdg/gpushare/broker.sock" % tmp_path
        # Another shell of the same user, with the lines the demo printed
        # and nothing else of the demo's: the broker knows the kernel by the
        # id the server gave it, on the demo's (simulated) GPU.
        pasted = [demo.wait_line("  export PATH="), demo.wait_line("  export MANPATH=")]
        assert pasted == ["  export PATH=%s/bin:$PATH" % prefix,
                          "  export MANPATH=%s/share/man:$MANPATH" % prefix]
        assert not demo.printed("  export GPUSHARE_BROKER")
        shell = "\n".join(pasted + ["gpushare status --json", "man -w gpushare"])
        r = subprocess.run(["bash", "-ec", shell], env=user_env(tmp_path), capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout[:r.stdout.rindex("}") + 1])
        assert st["simulated"] and st["endpoint"] == endpoint, st
        assert kid in [s["id"] for s in st["gpus"][0]["sessions"]], st
        assert r.stdout.splitlines()[-1] == prefix + "/share/man/man1/gpushare.1"
    finally:
        demo.proc.send_signal(signal.SIGINT)  # Ctrl-C: its trap stops the server and the broker
        try:
            demo.wait(120)
        except subprocess.TimeoutExpired:
            # What did not stop, and what its logs say.
            logs = os.path.join(prefix, "var", "log")
            for name in ("broker.log", "notebook.log"):
                path = os.path.join(logs, name)
                if os.path.exists(path):
                    print("== %s (last 40 lines)" % name)
                    print("\n".join(open(path).read().splitlines()[-40:]))
            print(subprocess.run(["ps", "-eo", "pid,ppid,stat,wchan:20,args", "--forest"],
                                 capture_output=True, text=True).stdout)
            raise
        finally:
            gstest.kill_strays()


def test_install_deps_says_the_cuda_headers_first(tmp_path):
    """Before any package: the one prerequisite Debian has no package for."""
    for args in ([], ["--run"]):
        r = subprocess.run([os.path.join(gstest.SRCDIR, "build-aux", "install-deps.sh")] + args,
                           env=dict(os.environ, CUDA_DIR=str(tmp_path)), capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and r.stdout == ""
        assert "install-deps: gpushare is built against the CUDA 12 or 13 headers (cuda.h), " \
               "and\n  %s/include/cuda.h is missing." % tmp_path in r.stderr
        assert "cuda-toolkit-12-8" in r.stderr and "CUDA_DIR=/path" in r.stderr


def test_a_tree_configured_in_place_is_cleaned_for_out_of_tree_builds(tmp_path):
    aux = tmp_path / "build-aux"
    aux.mkdir()
    script = aux / "out-of-tree.sh"
    script.write_bytes(open(os.path.join(gstest.SRCDIR, "build-aux", "out-of-tree.sh"),
                            "rb").read())
    script.chmod(0o755)
    r = subprocess.run([str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""  # not configured in place: nothing to do
    (tmp_path / "config.status").write_text("")
    (tmp_path / "Makefile").write_text("distclean:\n\trm -f config.status Makefile\n")
    r = subprocess.run([str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "this source tree was configured in place" in r.stderr
    assert not (tmp_path / "config.status").exists()
