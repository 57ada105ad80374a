"""Shared helpers for the integration tests: where the build products are,
how to run on the simulated GPU, and a broker that is awaited through its
systemd readiness notification rather than by sleeping."""
import json
import os
import signal
import socket
import subprocess
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("GS_SRCDIR") or os.path.abspath(os.path.join(HERE, "..", ".."))
BUILDDIR = os.environ.get("GS_BUILDDIR") or SRCDIR
PYTHON = os.environ.get("GS_KERNEL_PYTHON", "/usr/bin/python3")

BROKER = os.path.join(BUILDDIR, "broker", "gpushare-broker")
CLI = os.path.join(BUILDDIR, "cli", "gpushare")
LAUNCH = os.path.join(BUILDDIR, "launcher", "gpushare-launch")
HOOK = os.path.join(BUILDDIR, "libhook", ".libs", "libgpushare-hook.so")
SIMLIB_DIR = os.path.join(BUILDDIR, "tests", "simcuda", ".libs")
GPUSIM_DIR = os.path.join(SRCDIR, "tests", "simcuda")
LOGO_DIR = os.path.join(SRCDIR, "kernelspecs", "shared-gpu")


def sim_env(tmp_path, memory="1G", extra=None):
    """Environment for a process on a fresh simulated GPU of its own."""
    env = dict(os.environ)
    name = "/gstest-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    env.update({
        "LD_LIBRARY_PATH": SIMLIB_DIR,
        "GPUSHARE_SIM_NAME": name,
        "GPUSHARE_SIM_MEMORY": memory,
        "GPUSHARE_SIM_LOG": str(tmp_path / "sim.log"),
        "PYTHONPATH": GPUSIM_DIR,
        "GPUSHARE_HOOK": HOOK,
        "GPUSHARE_LOGO_DIR": LOGO_DIR,
    })
    env.pop("LD_PRELOAD", None)
    if extra:
        env.update(extra)
    return env


def unlink_sim(env):
    name = env.get("GPUSHARE_SIM_NAME", "")
    try:
        os.unlink("/dev/shm/" + name.lstrip("/"))
    except FileNotFoundError:
        pass


class Broker:
    """A gpushare-broker started for one test.  start() returns once the
    broker has sent READY=1 on its NOTIFY_SOCKET (it is bound by then)."""

    def __init__(self, tmp_path, env, args=(), cmd=None):
        self.tmp_path = tmp_path
        self.cmd = list(cmd) if cmd else [BROKER, "-v"]  # cmd: another broker's command line
        self.endpoint = "ipc://%s" % (tmp_path / "broker.sock")
        self.env = dict(env, GPUSHARE_BROKER=self.endpoint)
        self.args = list(args)
        self.proc = None
        self.stderr_path = tmp_path / "broker.stderr"

    def start(self, timeout=15):
        notify_path = str(self.tmp_path / "notify.sock")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(timeout)
        env = dict(self.env, NOTIFY_SOCKET=notify_path)
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(self.cmd + self.args, env=env, stderr=self.stderr,
                                     stdout=subprocess.DEVNULL)
        try:
            while True:
                msg = notify.recv(4096).decode()
                if "READY=1" in msg.split("\n"):
                    return self
        except socket.timeout:
            self.proc.kill()
            raise RuntimeError("broker did not become ready:\n" + self.log())
        finally:
            notify.close()

    def log(self):
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout)
        if self.proc:
            self.stderr.close()
        return self.proc.returncode if self.proc else None

    def cli(self, *args, check=True, timeout=10):
        r = subprocess.run([CLI] + list(args), env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("gpushare %s failed (%d): %s" % (args, r.returncode, r.stderr))
        return r

    def status(self):
        return json.loads(self.cli("status", "--json").stdout)


def install_kernelspec(prefix, env, *args):
    """Install the Shared GPU kernelspec under prefix with the build tree's
    launcher; returns the kernels directory."""
    r = subprocess.run([CLI, "kernelspec", "install", "--prefix", str(prefix), "--launcher",
                        LAUNCH, "--python", PYTHON] + list(args), env=env, capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError("kernelspec install failed: " + r.stderr)
    return os.path.join(str(prefix), "share", "jupyter", "kernels")


def skip_late_kernel_info(kc):
    """Make kc.get_shell_msg skip kernel_info replies.  jupyter_client's
    wait_for_ready asks again whenever a reply takes over 1 s or IOPub over
    0.2 s (a loaded machine), and the late replies then wait on the shell
    channel, where a test expects the reply to its own request."""
    get = kc.get_shell_msg

    def get_shell_msg(*args, **kwargs):
        while True:
            msg = get(*args, **kwargs)
            if msg["msg_type"] != "kernel_info_reply":
                return msg
    kc.get_shell_msg = get_shell_msg
    return kc


def start_kernel(kernels_dir, env, name="shared-gpu"):
    """Start a kernel from the spec `name` found in kernels_dir, with env,
    through Debian's jupyter_client; returns (manager, client)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    ksm = KernelSpecManager(kernel_dirs=[kernels_dir])
    km = KernelManager(kernel_name=name, kernel_spec_manager=ksm)
    km.start_kernel(env=env)
    kc = skip_late_kernel_info(km.client())
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
    except RuntimeError:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return km, kc


def run_cell(kc, code, timeout=60):
    """Execute code; returns (reply content, stdout text, stderr text)."""
    outputs = []
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=outputs.append)
    streams = {"stdout": "", "stderr": ""}
    for m in outputs:
        if m["msg_type"] == "stream":
            streams[m["content"]["name"]] += m["content"]["text"]
    return reply["content"], streams["stdout"], streams["stderr"]
