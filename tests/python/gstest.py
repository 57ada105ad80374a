"""The helpers of the Python integration tests (their fixtures are in
conftest.py; fakebroker.py is the stand-in broker, gpuworker.py the
program that plays a notebook's process): where the build's products are,
environments on the simulated GPU, waiting, ports, processes whose lines a
test reads, the broker and its protocol, what the simulated driver logs,
/proc, a terminal (tmux), Jupyter kernels and servers, the system
service, a virtual clock.

The rules the tests keep (a loaded 2-core runner or a sanitizer build
must not make them fail, and each must still be able to fail):
  - No sleep stands in for an event that can be awaited: a test waits for a
    line a process prints (Proc), a message a broker gets (FakeBroker), a
    record in a log, or a condition nothing announces (wait_until: the
    broker's status, /proc, a file).  A timeout only limits a wait for
    something that must happen; passing never depends on it.
  - No test asserts how fast something is (bench/eval measures that, on a
    GPU).  "At once" is checked by cause and order (what the broker's event
    log says, events on one CLOCK_MONOTONIC: probe lines, FakeBroker
    records, the simulated driver's log), by giving slower causes no
    chance (a timer set far beyond the test), on the hook's own clock (its
    heartbeats), or on a virtual one (VirtualClockLoop).
  - A check that something did not happen waits for a later event that
    would have come after it.
  - Ports: a server we start binds what it is given and tells us (ipc
    sockets in a private directory, a bound socket passed on); a program
    that must be told a TCP port up front gets one from reserve_port() and
    is started again by with_ports() if the port was taken after all.
"""
import asyncio
import ctypes
import json
import os
import pathlib
import re
import select
import selectors
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid

import kernelports
from kernelports import reserve_port  # noqa: F401 (tests take it from gstest)

# A test run started in the background (`nohup .ci/run &`) ignores SIGINT,
# and programs inherit an ignored signal through exec: a test's Ctrl-C to
# a program (run-demo.sh's trap) would do nothing.  A handler is not
# inherited, so the programs the tests start get SIGINT's default again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# ---- where things are: the one place that names the build's products ----

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("GS_SRCDIR") or os.path.abspath(os.path.join(HERE, "..", ".."))
BUILDDIR = os.environ.get("GS_BUILDDIR") or SRCDIR
PYTHON = os.environ.get("GS_KERNEL_PYTHON", "/usr/bin/python3")

BROKER = os.path.join(BUILDDIR, "broker", "gpushare-broker")
CLI = os.path.join(BUILDDIR, "cli", "gpushare")
LAUNCH = os.path.join(BUILDDIR, "launcher", "gpushare-launch")
HOOK = os.path.join(BUILDDIR, "libhook", ".libs", "libgpushare-hook.so")
RESTORE_HELPER = os.path.join(BUILDDIR, "libhook", "restore", "gpushare-restore")
UNIT = os.path.join(BUILDDIR, "broker", "gpushare-broker.service")
PROBE = os.path.join(BUILDDIR, "tests", "hook", "hook_probe")
SIMLIB_DIR = os.path.join(BUILDDIR, "tests", "simcuda", ".libs")
PROVISIONER_PATH = os.path.join(BUILDDIR, "kernelspecs", "pythonpath")
# The extension and the provisioner's modules, without its entry point
# (kernelspecs/Makefile.am): kernels load gpushare_ipython from here.
EXTENSION_PATH = os.path.join(BUILDDIR, "kernelspecs", "extpath")
GPUSIM_DIR = os.path.join(BUILDDIR, "tests", "simcuda", "pythonpath")  # as run-demo.sh has it
LOGO_DIR = os.path.join(SRCDIR, "kernelspecs", "shared-gpu")
EXAMPLE_CONF = os.path.join(SRCDIR, "broker", "broker.conf.example")
EXAMPLE_NOTEBOOK = os.path.join(SRCDIR, "examples", "hello-shared-gpu.ipynb")
# The example tour's settings for a test that runs hello-shared-gpu.ipynb
# alone: a moment of GPU work, a few MiB to park.
EXAMPLE_QUICK = {"LOOP_S": 0.1, "MEMORY_SHARE": 0.02}
# The example parks its memory (%gpushare release): the broker's host pool
# then pins chunks ahead, 1 GiB each by default, which takes seconds here
# and which the broker's exit waits for.  Small ones for tests that run it
# (the sim marker's extra).
EXAMPLE_POOL = {"GPUSHARE_POOL_CHUNK": "4M"}
WORKER = os.path.join(HERE, "gpuworker.py")
FAKEBROKER = os.path.join(HERE, "fakebroker.py")

MIB = 1 << 20

# ---- environments on the simulated GPU -----------------------------------


def sim_env(tmp_path, memory="1G", concurrency=None, extra=None):
    """Environment for processes on a fresh simulated GPU of their own.
    concurrency: kernels the GPU runs at once (the first process to attach,
    usually the broker, sets it for all)."""
    env = dict(os.environ)
    name = "/gstest-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    env.update({
        "LD_LIBRARY_PATH": SIMLIB_DIR,
        "GPUSHARE_SIM_NAME": name,
        "GPUSHARE_SIM_MEMORY": memory,
        "GPUSHARE_SIM_LOG": str(pathlib.Path(tmp_path) / "sim.log"),
        # gpusim for the tests' cells; gpushare_ipython (and the provisioner's
        # broker client it uses), which the Shared GPU kernelspec loads; not
        # the provisioner's entry point (with_provisioner in the tests)
        "PYTHONPATH": os.pathsep.join([GPUSIM_DIR, EXTENSION_PATH]),
        "GPUSHARE_HOOK": HOOK,
        # the hook's helper for a broker's death (else the installed one)
        "GPUSHARE_RESTORE_HELPER": RESTORE_HELPER,
        "GPUSHARE_LOGO_DIR": LOGO_DIR,
    })
    if concurrency:
        env["GPUSHARE_SIM_CONCURRENCY"] = str(concurrency)
    env.pop("LD_PRELOAD", None)
    if extra:
        env.update(extra)
    return gpu_count(env)


def gpu_count(env):
    """env with GPUSHARE_GPU_COUNT telling the hook how many GPUs the
    simulated driver has (it has no /proc/driver/nvidia entries to count,
    and placement at load asks the broker only where there are several)."""
    if env.get("GPUSHARE_SIM_DEVICES"):
        env["GPUSHARE_GPU_COUNT"] = env["GPUSHARE_SIM_DEVICES"]
    return env


def unlink_sim(env):
    name = env.get("GPUSHARE_SIM_NAME", "")
    try:
        os.unlink("/dev/shm/" + name.lstrip("/"))
    except FileNotFoundError:
        pass


def hook_env(sim, endpoint, **extra):
    """The simulated GPU's environment with the hook preloaded and pointed
    at endpoint; nothing of the test runner's own gpushare settings."""
    env = dict(sim)
    env.update({"LD_PRELOAD": HOOK, "GPUSHARE_BROKER": endpoint})
    for k in ("GPUSHARE_DISABLE", "GPUSHARE_LOG", "GPUSHARE_SESSION",
              "GPUSHARE_IDLE_RELEASE_MS"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return gpu_count(env)


def kernel_env(env, **extra):
    """env for a kernel that a notebook server starts: without the kernel
    id, user, notebook and session that the launcher works out itself."""
    env = dict(env)
    for k in ("GPUSHARE_KERNEL_ID", "GPUSHARE_USER", "JUPYTERHUB_USER", "JPY_SESSION_NAME",
              "GPUSHARE_SESSION", "GPUSHARE_LOG"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


# ---- waiting ---------------------------------------------------------------


def wait_until(pred, timeout=30.0, what="condition", interval=0.01):
    """pred()'s first true value, polled: for a condition no event
    announces (the broker's status, /proc, a file another process writes).
    AssertionError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def wait_for_text(read, text, timeout=30.0):
    """Waits until read() (a log file's text: a log is written, not
    announced) contains text; returns that text."""
    return wait_until(lambda: text in read() and read(), timeout, "%r in the log" % text)


# ---- ports -------------------------------------------------------------------


class PortInUse(Exception):
    """A program we started could not bind the port it was given."""


def port_clash(text):
    return "Address already in use" in text or "EADDRINUSE" in text or \
        re.search(r"port \d+ is already in use", text) is not None


def with_ports(start, n=1, attempts=5):
    """start(*ports) with n reserved ports; again with new ones while it
    raises PortInUse.  Returns what start returns."""
    for i in range(attempts):
        try:
            return start(*[reserve_port() for _ in range(n)])
        except PortInUse:
            if i == attempts - 1:
                raise


def bound_listener(host="127.0.0.1"):
    """A listening TCP socket on a port of the kernel's choosing, for a
    server that can take it ready-made (ZMQ_USE_FD): no moment between
    choosing the port and binding it."""
    s = socket.socket()
    s.bind((host, 0))
    s.listen(16)
    return s


# ---- processes whose lines a test reads --------------------------------------


class Proc:
    """A process started with stdin and stdout pipes (a thread collects the
    lines it prints) and stderr in a file.  expect() takes lines in order;
    wait_line() and wait_count() look at all of them."""

    def __init__(self, argv, env, tmp_path, name, **popen_kw):
        self.name = name
        self.lines = []
        self.cond = threading.Condition()
        self.pos = 0
        self.fail_on = None  # a prefix that means the process reports an error
        self.stderr_path = pathlib.Path(tmp_path) / ("%s.stderr" % name)
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True,
                                         **popen_kw)
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def pid(self):
        return self.proc.pid

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # EOF
            self.cond.notify_all()

    def _wait(self, found, timeout, what):
        """found() under the lock, until it returns something other than
        None; fails when the process ends or the timeout passes first."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = found()
                if v is not None:
                    return v
                if self.lines and self.lines[-1] is None:
                    raise AssertionError("%s ended before %s; output %s; stderr:\n%s" % (
                        self.name, what, self.lines[-10:], self.stderr()))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s: no %s within %.0f s; output %s; stderr:\n%s" % (
                        self.name, what, timeout, self.lines[-10:], self.stderr()))
                self.cond.wait(left)

    def expect(self, prefix, timeout=30.0):
        """The next line starting with prefix (after the line the last
        expect() returned; lines in between are passed over)."""
        def found():
            while self.pos < len(self.lines) and self.lines[self.pos] is not None:
                line = self.lines[self.pos]
                self.pos += 1
                if self.fail_on and line.startswith(self.fail_on):
                    raise AssertionError("%s: %s\n%s" % (self.name, line, self.stderr()))
                if line.startswith(prefix):
                    return line
            return None
        return self._wait(found, timeout, repr(prefix))

    def wait_line(self, prefix, timeout=30.0):
        """The first line printed so far or later that starts with prefix."""
        return self._wait(lambda: next((line for line in self.lines
                                        if line is not None and line.startswith(prefix)), None),
                          timeout, repr(prefix))

    def wait_count(self, prefix, n, timeout=30.0):
        """Waits until n lines start with prefix."""
        return self._wait(lambda: True if self.count(prefix) >= n else None, timeout,
                          "%d lines %r" % (n, prefix))

    def count(self, prefix):
        with self.cond:
            return sum(1 for line in self.lines if line is not None and line.startswith(prefix))

    def printed(self, prefix):
        return self.count(prefix) > 0

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout=30.0):
        return self.proc.wait(timeout)

    def stderr(self):
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class Probe(Proc):
    """tests/hook/hook_probe running `steps` with the hook preloaded.  Each
    line it prints ends with t=<CLOCK_MONOTONIC ns>, the clock of the
    simulated driver's log and of FakeBroker's records; "wait" steps go on
    when the test says go()."""

    def __init__(self, tmp_path, env, steps, name="probe"):
        super().__init__([PROBE] + list(steps), env, tmp_path, name)
        self.fail_on = "error"

    def expect(self, prefix, timeout=30.0):
        """(fields, t_ns) of the next line starting with prefix."""
        fields = super().expect(prefix, timeout).split()
        t = int(fields[-1][2:]) if fields[-1].startswith("t=") else 0
        return fields[:-1], t

    def time_of(self, prefix):
        """t of the first line printed so far that starts with prefix."""
        line = self.wait_line(prefix + " ", timeout=0)
        return int(line.split()[-1][2:])

    def times_of(self, prefix):
        """t of every line printed so far that starts with prefix."""
        with self.cond:
            return [int(line.split()[-1][2:]) for line in self.lines
                    if line is not None and line.startswith(prefix)]

    def go(self):
        self.send("go")


def wait_states(probe, pred, timeout=30.0):
    """The probe's "waitstate" lines (its waitwatch step) parsed, once one
    satisfies pred(state); returns that state."""
    def found():
        for line in probe.lines:
            if line is not None and line.startswith("waitstate "):
                state = json.loads(line[len("waitstate "):line.rindex(" t=")])
                if pred(state):
                    return state
        return None
    return probe._wait(found, timeout, "a wait state")


def ensure_probe():
    if not os.path.exists(PROBE):
        subprocess.run(["make", "-C", os.path.dirname(PROBE), "hook_probe"], check=True,
                       stdout=subprocess.DEVNULL)
    return PROBE


class Worker(Proc):
    """gpuworker.py in mode loop (simulated kernels of `us` microseconds
    for ever; prints "first" after the first) or steps (reads "run N",
    answers "done N")."""

    def __init__(self, env, mode, us, name, tmp_path):
        super().__init__([PYTHON, WORKER, mode, str(us), name], env, tmp_path, name)

    def expect(self, text, timeout=30.0):
        return self.wait_line(text, timeout)


class Notebook(Proc):
    """gpuworker.py in command mode as one notebook session: the fake
    launcher registers it and reports every command as a cell (busy, the
    command, idle), so the broker sees it as it sees a notebook."""

    def __init__(self, name, env, tmp_path, launcher, cells=True):
        super().__init__([PYTHON, WORKER, "commands"], dict(env, GPUSHARE_SESSION=name),
                         tmp_path, name, bufsize=1)
        self.launcher = launcher
        self.session = launcher.register(name, self.pid) if cells else name
        self.cells = cells
        self.n = 0

    def cell(self, line, timeout=60):
        """Runs one command as a notebook cell; returns its answer line."""
        self.n += 1
        if self.cells:
            self.launcher.cell(self.session, "busy", "%s-%d" % (self.name, self.n))
        try:
            return self.command(line, timeout)
        finally:
            if self.cells:
                self.launcher.cell(self.session, "idle", "%s-%d" % (self.name, self.n))

    def command(self, line, timeout=60):
        """Sends one command (no cell around it) and returns its answer."""
        self.send(line)
        return self.answer(timeout)

    def answer(self, timeout=60):
        return self.expect("", timeout).strip()


# ---- the broker and its protocol ------------------------------------------


class BrokerExited(AssertionError):
    pass


class Broker:
    """A gpushare-broker started for one test in run_dir (its socket, its
    notify socket, its stderr, its event log).  start() returns once the
    broker has sent READY=1 on its NOTIFY_SOCKET (it is bound by then), and
    fails as soon as the broker exits instead (PortInUse when a port it was
    given is taken)."""

    def __init__(self, run_dir, env, args=(), cmd=None, event_log=False):
        self.run_dir = pathlib.Path(run_dir)
        self.cmd = list(cmd) if cmd else [BROKER, "-v"]  # cmd: another broker's command line
        self.endpoint = "ipc://%s" % (self.run_dir / "broker.sock")
        self.env = dict(env, GPUSHARE_BROKER=self.endpoint)
        self.args = list(args)
        self.event_log = None
        if event_log:
            self.event_log = self.run_dir / "events.jsonl"
            self.args += ["--event-log", str(self.event_log)]
        self.proc = None
        self.stderr_path = self.run_dir / "broker.stderr"

    def start(self, timeout=60):
        notify_path = str(self.run_dir / "notify.sock")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        env = dict(self.env, NOTIFY_SOCKET=notify_path)
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(self.cmd + self.args, env=env, stderr=self.stderr,
                                     stdout=subprocess.DEVNULL)
        exited = os.pidfd_open(self.proc.pid)
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                ready, _, _ = select.select([notify, exited], [], [], max(left, 0))
                if notify in ready:
                    if "READY=1" in notify.recv(4096).decode().split("\n"):
                        return self
                elif exited in ready:
                    self.proc.wait()
                    self.stderr.close()
                    if port_clash(self.log()):
                        raise PortInUse(self.log())
                    raise BrokerExited("the broker exited (%d) before it was ready:\n%s" % (
                        self.proc.returncode, self.log()))
                elif not ready:
                    self.stop(signal.SIGKILL)
                    raise AssertionError("the broker was not ready within %d s:\n%s" % (
                        timeout, self.log()))
        finally:
            os.close(exited)
            notify.close()

    def log(self):
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                # A broker that does not stop fails the test, and goes:
                # left running (a hung loop spins) it took a core from every
                # test after it.
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError("the broker did not stop within %.0f s of %s:\n%s" % (
                    timeout, signal.Signals(sig).name, self.log()[-3000:])) from None
        if self.proc:
            self.stderr.close()
        return self.proc.returncode if self.proc else None

    def cli(self, *args, check=True, timeout=30):
        r = subprocess.run([CLI] + list(args), env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("gpushare %s failed (%d): %s" % (args, r.returncode, r.stderr))
        return r

    def status(self):
        return json.loads(self.cli("status", "--json").stdout)

    def sessions(self):
        """The sessions of GPU 0 by id."""
        return {s["id"]: s for g in self.status().get("gpus", [])[:1] for s in g["sessions"]}

    def configure(self, **settings):
        configure(self.endpoint, **settings)

    def events(self, kind=None):
        """The broker's event log (its records so far), of one kind."""
        return read_events(self.event_log, kind)

    def synced_events(self, kind=None):
        """The event log with everything the broker did before this call:
        a status round trip comes after all it handled before."""
        self.status()
        return self.events(kind)


class Client:
    """A raw protocol client (pyzmq DEALER): a fake launcher, a fake hook, `set`."""

    # A reply that takes this long means a hung broker, not a slow machine.
    TIMEOUT_MS = 30000

    def __init__(self, endpoint, role="launcher"):
        import zmq
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, self.TIMEOUT_MS)
        self.sock.connect(endpoint)
        self.seq = 0
        r = self.call({"type": "hello", "role": role, "pid": os.getpid()})
        assert r["type"] == "welcome", r
        self.welcome = r

    def send(self, msg):
        self.seq += 1
        self.sock.send(json.dumps(dict(msg, v=1, seq=self.seq)).encode())

    def recv(self):
        return json.loads(self.sock.recv())

    def call(self, msg):
        self.send(msg)
        while True:
            reply = self.recv()
            if reply.get("seq") == self.seq:
                return reply

    def register(self, kernel_id, pid):
        r = self.call({"type": "register", "kernel_id": kernel_id, "user": "tester",
                       "notebook": kernel_id + ".ipynb", "pid": pid})
        assert r["type"] == "registered", r
        return r["session"]

    def cell(self, session, state, msg_id="m"):
        self.send({"type": "cell", "session": session, "state": state, "msg_id": msg_id})

    def cell_synced(self, session, state, msg_id="m"):
        """cell, then a round trip on the same socket: the broker has taken
        the cell (a `cell` has no reply) before anything that follows."""
        self.cell(session, state, msg_id)
        r = self.call({"type": "status"})
        assert r["type"] == "status_reply", r

    def close(self):
        self.sock.close()


def configure(endpoint, **settings):
    """Changes the broker's settings with a `set` message (a broker that
    answers not_implemented fails the test: a missing feature is a failure,
    not a skip)."""
    c = Client(endpoint, "cli")
    try:
        r = c.call({"type": "set", "settings": settings})
        assert r["type"] == "ok", r
    finally:
        c.close()


def session_of(status, pid):
    """The session entry (on GPU 0) holding pid, or None."""
    for s in status["gpus"][0]["sessions"]:
        if pid in s["pids"]:
            return s
    return None


def entry(status, session):
    """The session's entry on GPU 0 of a status object, or None: by its id,
    else by its name (another user's session named NAME has the id
    NAME@UID; the first such, for the multi-user tests)."""
    sessions = status["gpus"][0]["sessions"]
    for s in sessions:
        if s["id"] == session:
            return s
    for s in sessions:
        if s.get("name") == session:
            return s
    return None


def read_events(path, kind=None):
    """A broker's event log (JSON lines) as a list of objects (of one kind)."""
    if path is None or not os.path.exists(path):
        return []
    with open(path) as f:
        out = [json.loads(line) for line in f if line.strip()]
    return [e for e in out if kind is None or e["event"] == kind]


def turns(events):
    """The grants of an event log with what ended each: [(grant, revoke or
    None, release or None)], matched by grant id.  A grant sent again with
    the same id ("again": a new idle release) is the same grant: the first
    says when it began and for how long."""
    out = {}
    for e in events:
        if e["event"] == "grant":
            out.setdefault(e["grant_id"], [e, None, None])
        elif e["event"] == "revoke" and e["grant_id"] in out:
            out[e["grant_id"]][1] = e
        elif e["event"] == "release" and e["grant_id"] in out:
            out[e["grant_id"]][2] = e
    return [tuple(v) for v in out.values()]


def park_broker(run_dir, sim, *settings):
    """A broker on the simulated GPU with parking settings ("park_idle_s=0",
    ...) and an event log."""
    args = []
    for s in settings:
        args += ["--set", s]
    return Broker(run_dir, sim, args, event_log=True).start()


def inject(sim, step, count=1):
    """The next `count` calls of checkpoint step `step` on the simulated GPU
    fail (gpusim_inject_checkpoint_failure), from a process of its own."""
    code = ("import ctypes, sys; lib = ctypes.CDLL('libcuda.so.1'); "
            "sys.exit(lib.gpusim_inject_checkpoint_failure(sys.argv[1].encode(), "
            "int(sys.argv[2])))")
    subprocess.run([PYTHON, "-c", code, step, str(count)], env=sim, check=True, timeout=30)


# ---- what the simulated driver logs --------------------------------------------


def sim_log(env):
    """The simulated driver's execution log: one dict per executed op."""
    path = env["GPUSHARE_SIM_LOG"]
    if not os.path.exists(path):
        return []
    with open(path) as f:
        # Only whole lines: a process may be writing the last one now.
        return [json.loads(line) for line in f if line.strip() and line.endswith("\n")]


def kernels(env, name=None, pid=None):
    """The kernels the simulated GPU ran (of one name, of one process), by
    start time."""
    return sorted((r for r in sim_log(env) if r.get("op") == "kernel" and
                   (name is None or r.get("name") == name) and
                   (pid is None or r.get("pid") == pid)), key=lambda r: r["start_ns"])


def overlaps(ks):
    """Pairs of kernels of different processes that ran at the same time."""
    bad = []
    ks = sorted(ks, key=lambda r: r["start_ns"])
    for i, a in enumerate(ks):
        for b in ks[i + 1:]:
            if b["start_ns"] >= a["end_ns"]:
                break
            if b["pid"] != a["pid"]:
                bad.append((a, b))
    return bad


def runs(ks):
    """Consecutive kernels of one process: [(pid, first start, last end, n)]."""
    out = []
    for k in sorted(ks, key=lambda r: r["start_ns"]):
        if out and out[-1][0] == k["pid"]:
            pid, s, _, n = out[-1]
            out[-1] = (pid, s, k["end_ns"], n + 1)
        else:
            out.append((k["pid"], k["start_ns"], k["end_ns"], 1))
    return out


# ---- processes in /proc --------------------------------------------------------


def _stat(pid):
    """(comm, state, ppid) of a process, or None."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    return comm, fields[0], int(fields[1])


def _procs():
    """{pid: (comm, state, ppid)} of every process, zombies included."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(d)
            if st:
                out[int(d)] = st
    return out


def all_watchers():
    """Pids of every live (not zombie) gpushare-watch process."""
    return [p for p, (comm, state, _) in _procs().items()
            if comm == "gpushare-watch" and state != "Z"]


def watchers_of(pid):
    """Pids of the live gpushare-watch processes whose parent is pid."""
    return [w for w in all_watchers() if (_stat(w) or ("", "", 0))[2] == pid]


def orphan_watchers(before=()):
    """Watchers (not in before) whose parent is no longer a kernel: they
    should not exist for more than a moment."""
    return [w for w in all_watchers() if w not in before and
            (_stat(w) or ("", "", 1))[2] == 1]


def pid_gone(pid):
    st = _stat(pid)
    return st is None or st[1] == "Z"


def descendants(pid, procs=None):
    procs = _procs() if procs is None else procs
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, (_, _, pp) in procs.items() if pp == p]
        found += kids
        todo += kids
    return found


def become_subreaper():
    """Orphans of the processes this test starts (a hub's proxy and servers
    when the hub dies first, chromium's helpers) become this process's
    children instead of init's, so that kill_strays() finds them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def stop(proc, timeout=60):
    """SIGTERM a process we started (a hub, a notebook server shut their
    children down on it) and wait for it; SIGKILL when it does not end."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


def kill_strays(keep=(), timeout=30):
    """SIGKILL every process under this one except the pids in keep (and
    theirs), and reap those that are (or become, as orphans) our children;
    with become_subreaper() that covers orphans.  Returns the command lines
    of the live ones killed, for the test to report."""
    procs = _procs()
    keep_all = set(keep)
    for k in keep:
        keep_all.update(descendants(k, procs))
    strays = [p for p in descendants(os.getpid(), procs) if p not in keep_all]
    names = []
    for p in strays:
        if procs[p][1] == "Z":
            continue
        try:
            with open("/proc/%d/cmdline" % p, "rb") as f:
                names.append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    for p in strays:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(p, os.WNOHANG)[0] == p:
                    break
            except ChildProcessError:  # not (yet) ours: wait until its parent reaps it
                if p not in _procs():
                    break
            time.sleep(0.05)  # cleaning up: nothing to assert, nothing announces it
    return names


# ---- a terminal ------------------------------------------------------------------


class Terminal:
    """A program (a shell unless told) in a detached tmux session of a
    fixed size, on a tmux server of its own (its socket in run_dir): what
    a person sees is capture-pane's text, what they type send-keys."""

    def __init__(self, run_dir, env, command="sh", width=150, height=30):
        self.sock = str(pathlib.Path(run_dir) / "tmux.sock")
        env = dict(env, PS1="$ ", HOME=str(run_dir))
        self.tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), command,
                  env=env)

    def tmux(self, *args, env=None):
        return subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null"] + list(args),
                              env=env, capture_output=True, text=True, timeout=30, check=True)

    def pid(self):
        """The pid of the pane's program."""
        return int(self.tmux("list-panes", "-t", "t", "-F", "#{pane_pid}").stdout.split()[0])

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "t").stdout

    def type(self, *keys):
        self.tmux("send-keys", "-t", "t", *keys)

    def wait(self, pred, what, timeout=60):
        """The screen once pred(screen) holds (polled: a terminal announces
        nothing)."""
        try:
            return wait_until(lambda: pred(self.screen()) and self.screen(), timeout, what,
                              interval=0.1)
        except AssertionError as e:
            raise AssertionError("%s; the screen:\n%s" % (e, self.screen()))

    def close(self):
        """Ends the session and the server: the terminal closes (its
        programs get SIGHUP)."""
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=30)


# ---- Jupyter ---------------------------------------------------------------------


def install_kernelspec(prefix, env, *args):
    """Install the Shared GPU kernelspec under prefix with the build tree's
    launcher; returns the kernels directory."""
    r = subprocess.run([CLI, "kernelspec", "install", "--prefix", str(prefix), "--launcher",
                        LAUNCH, "--python", PYTHON] + list(args), env=env, capture_output=True,
                       text=True, timeout=60)
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

    kernelports.install()
    ksm = KernelSpecManager(kernel_dirs=[kernels_dir])
    km = KernelManager(kernel_name=name, kernel_spec_manager=ksm)
    km.start_kernel(env=env)
    kc = skip_late_kernel_info(km.client())
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
    except RuntimeError:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return km, kc


def restart_kernel(km, kc, timeout=60):
    """km.restart_kernel() and a new client for the new kernel, ready;
    returns it (kc's channels are stopped).  The old client's IOPub may
    pass wait_for_ready on a message of the old kernel while its SUB
    socket has not reconnected yet, and then miss the next cell's output
    (seen in CI: a cell after a restart timed out waiting for output)."""
    km.restart_kernel()
    kc.stop_channels()
    kc = skip_late_kernel_info(km.client())
    kc.start_channels()
    kc.wait_for_ready(timeout=timeout)
    return kc


def kernel_pid(km):
    return km.provisioner.process.pid


def run_cell(kc, code, timeout=120):
    """Execute code; returns (reply content, stdout text, stderr text)."""
    outputs = []
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=outputs.append)
    streams = {"stdout": "", "stderr": ""}
    for m in outputs:
        if m["msg_type"] == "stream":
            streams[m["content"]["name"]] += m["content"]["text"]
    return reply["content"], streams["stdout"], streams["stderr"]


def await_output(kc, msg_id, text, timeout=120):
    """Reads the kernel's IOPub until the cell msg_id prints text (a cell
    says where it is instead of the test guessing how long it takes)."""
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        m = kc.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.001))
        if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id:
            seen += m["content"]["text"]
    return seen


def held_cell(flag, code=""):
    """A cell that runs code and then stays busy until the file flag exists:
    the test, not a sleep, decides when the cell ends."""
    return ("import os, time\n" + code +
            "\nwhile not os.path.exists(%r): time.sleep(0.005)\n" % str(flag))


def example_notebook(name="hello-shared-gpu.ipynb", **params):
    """examples/NAME (nbformat's node) with params set the way papermill
    sets a notebook's parameters: a cell right after the one tagged
    "parameters" assigns them."""
    import nbformat

    nb = nbformat.read(os.path.join(SRCDIR, "examples", name), 4)
    if params:
        (at,) = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
        cell = nbformat.v4.new_code_cell("".join("%s = %r\n" % kv for kv in params.items()))
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(at + 1, cell)
    return nb


def run_example_notebook(tmp_path, kernels_dir, env, now=True, kernel_ids=None, **client_kw):
    """examples/hello-shared-gpu.ipynb (EXAMPLE_QUICK) run by nbclient with
    the Shared GPU kernel, shut down at the end (now: killed, else asked to
    shut down); returns the text of its outputs.  kernel_ids (a list) gets
    the id Jupyter gave the kernel."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = example_notebook(**EXAMPLE_QUICK)
    km = KernelManager(kernel_name="shared-gpu",
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]))
    client = NotebookClient(nb, km=km, timeout=120,
                            resources={"metadata": {"path": str(tmp_path)}}, **client_kw)
    try:
        client.execute(env=env)
    finally:
        if kernel_ids is not None and km.kernel_id:
            kernel_ids.append(km.kernel_id)
        if km.has_kernel:
            km.shutdown_kernel(now=now)  # nbclient leaves a passed-in manager's kernel running
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)


class Kernels:
    """Kernels started through a MultiKernelManager, as a notebook server
    does (connection files named kernel-<id>.json)."""

    def __init__(self, tmp_path, kernels_dir):
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.multikernelmanager import MultiKernelManager
        kernelports.install()
        self.tmp_path = tmp_path
        self.mkm = MultiKernelManager(
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]),
            connection_dir=str(tmp_path))
        self.clients = {}
        self.logs = {}
        self.files = []

    def start(self, env, name="shared-gpu"):
        log = self.tmp_path / ("kernel-%s.stderr" % uuid.uuid4().hex[:8])
        err = open(log, "w")  # open while the kernel lives: a restart reuses it
        self.files.append(err)
        kid = self.mkm.start_kernel(kernel_name=name, env=env, stderr=err)
        km = self.mkm.get_kernel(kid)
        kc = skip_late_kernel_info(km.client())
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=120)
        except RuntimeError as e:
            kc.stop_channels()
            raise AssertionError("%s; the kernel's stderr:\n%s" % (e, log.read_text())) from e
        self.clients[kid] = kc
        self.logs[kid] = log
        return kid, km, kc

    def log(self, kid):
        return self.logs[kid].read_text()

    def close(self):
        for kc in self.clients.values():
            kc.stop_channels()
        for kid in list(self.mkm.list_kernel_ids()):
            try:
                self.mkm.shutdown_kernel(kid, now=True)
            except Exception:
                pass
        for f in self.files:
            f.close()


def jupyter_env(env, tmp_path, **extra):
    """env for a Jupyter server or client of a test: the kernelspecs of
    install_kernelspec(tmp_path / "prefix", ...), its configuration, data
    and runtime files and HOME under tmp_path, and none of the session
    variables of the test's own environment (each kernel it starts finds
    its own); extra on top."""
    env = dict(env, JUPYTER_PATH=str(tmp_path / "prefix" / "share" / "jupyter"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
               JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"), HOME=str(tmp_path))
    for k in ("GPUSHARE_KERNEL_ID", "GPUSHARE_USER", "JUPYTERHUB_USER", "GPUSHARE_SESSION",
              "JPY_SESSION_NAME", "GPUSHARE_LOG", "PYTEST_CURRENT_TEST"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def open_notebook(server, path, broker):
    """A notebook (path under the server's notebooks directory) opened on
    the server with the Shared GPU kernel; (server session id, kernel id,
    the broker's session once it knows the notebook's path)."""
    r = server.api("POST", "/api/sessions", json={"path": path, "type": "notebook", "name": "",
                                                  "kernel": {"name": "shared-gpu"}})
    assert r.status_code == 201, r.text
    sid, kid = r.json()["id"], r.json()["kernel"]["id"]
    s = wait_until(lambda: broker.sessions().get(kid, {}).get("notebook") == path
                   and broker.sessions()[kid], what="the notebook's path %s at the broker" % path)
    assert s["kind"] == "notebook" and s["kernel_id"] == kid, s
    return sid, kid, s


class NotebookServer:
    """`jupyter notebook` on a loopback port with a token, offering the
    Shared GPU kernelspec installed for this test.  Notebook 6 takes its
    port up front (with port 0 it would not say which one it got): a
    reserved one, and another if it was taken all the same."""

    def __init__(self, tmp_path, env):
        self.tmp = tmp_path / "server"
        (self.tmp / "notebooks").mkdir(parents=True)
        self.token = "gstest-token"
        self.env = env
        self.log_path = self.tmp / "server.log"
        self.log = None
        if "JUPYTER_CONFIG_DIR" in env:  # its kernels take reserved ports too
            kernelports.server_config(env["JUPYTER_CONFIG_DIR"])
        with_ports(self._start)

    def _start(self, port):
        self.port = port
        self.url = "http://127.0.0.1:%d" % self.port
        if self.log:
            self.log.close()
        self.log = open(self.log_path, "w")
        args = [PYTHON, "-m", "notebook", "--no-browser", "--ip=127.0.0.1",
                "--port=%d" % self.port, "--port-retries=0", "--NotebookApp.token=" + self.token,
                "--notebook-dir=" + str(self.tmp / "notebooks")]
        if os.geteuid() == 0:
            args.append("--allow-root")  # CI may be root
        self.proc = subprocess.Popen(args, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_until(self._up, timeout=180, what="the notebook server", interval=0.2)

    def _up(self):
        import requests
        if self.proc.poll() is not None:
            log = self.log_path.read_text()
            if port_clash(log):
                raise PortInUse(log)
            raise AssertionError("the notebook server exited:\n" + log)
        try:
            return self.api("GET", "/api/status").status_code == 200
        except requests.ConnectionError:
            return False

    def api(self, method, path, **kw):
        import requests
        return requests.request(method, self.url + path, timeout=60,
                                headers={"Authorization": "token " + self.token}, **kw)

    def kernel_of(self, path):
        """The kernel (id, name) of the notebook at path, or None."""
        for s in self.api("GET", "/api/sessions").json():
            if s["path"] == path:
                return s["kernel"]["id"], s["kernel"]["name"]
        return None

    def stop(self):
        stop(self.proc, timeout=120)
        self.log.close()


class KernelChannel:
    """A kernel's websocket (api/kernels/ID/channels) as the notebook page
    uses it: execute() sends a cell, reply() awaits its end and returns
    (reply content, stdout, stderr).  The websocket lives on an event loop
    of its own thread, which reads every message as it comes (and so
    answers the server's pings however long the test waits)."""

    def __init__(self, url, token, timeout=60):
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        self.session = uuid.uuid4().hex
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        req = HTTPRequest(url, headers={"Authorization": "token " + token},
                          connect_timeout=timeout, request_timeout=timeout)

        async def connect():
            self.ws = await websocket_connect(req)
            self.messages = asyncio.Queue()
            self.reader = asyncio.ensure_future(self._read())

        try:
            self._run(connect(), timeout)
        except BaseException:
            self._stop_loop()
            raise

    async def _read(self):
        while True:
            raw = await self.ws.read_message()
            self.messages.put_nowait(raw)
            if raw is None:  # closed
                return

    def _run(self, coro, timeout):
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout),
                                                self.loop).result()

    def execute(self, code):
        msg_id = uuid.uuid4().hex
        msg = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                          "session": self.session, "version": "5.3", "date": ""},
               "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
               "content": {"code": code, "silent": False, "store_history": True,
                           "user_expressions": {}, "allow_stdin": False,
                           "stop_on_error": True}}

        async def send():
            await self.ws.write_message(json.dumps(msg))

        self._run(send(), 30)
        return msg_id

    def reply(self, msg_id, timeout=120):
        """The cell's execute_reply content and its streams, once the kernel
        has gone idle after it (all its output has arrived by then)."""
        streams = {"stdout": "", "stderr": ""}

        async def collect():
            content, idle = None, False
            while content is None or not idle:
                raw = await self.messages.get()
                if raw is None:
                    raise AssertionError("the kernel's websocket closed")
                m = json.loads(raw)
                if m.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                t = m["header"]["msg_type"]
                if t == "stream":
                    streams[m["content"]["name"]] += m["content"]["text"]
                elif t == "execute_reply":
                    content = m["content"]
                elif t == "status" and m["content"]["execution_state"] == "idle":
                    idle = True
            return content

        content = self._run(collect(), timeout)
        return content, streams["stdout"], streams["stderr"]

    def run(self, code, timeout=120):
        return self.reply(self.execute(code), timeout)

    def close(self):
        """Close the websocket, wait for the server's side of it, and end
        the loop's thread with no task left pending."""
        async def close():
            self.ws.close()
            await self.reader

        try:
            self._run(close(), 30)
        except Exception:
            pass
        self._stop_loop()

    def _stop_loop(self):
        async def cancel_the_rest():
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


# ---- the system service ------------------------------------------------------------


def read_unit(path):
    """{section: {key: [values]}} of a systemd unit file."""
    unit, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = unit.setdefault(line.strip("[]"), {})
            else:
                key, value = line.split("=", 1)
                section.setdefault(key.strip(), []).append(value.strip())
    return unit


# Each of these would break the broker: /dev/nvidia* (devices; ProtectClock
# implies a DeviceAllow= list), other users' /proc/PID, uids and ptrace-like
# rights over their processes (parking), nvidia-modprobe, TCP metrics.
FORBIDDEN_IN_UNIT = ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock",
                     "ProtectProc", "ProcSubset", "PrivateUsers", "User", "DynamicUser",
                     "CapabilityBoundingSet", "AmbientCapabilities", "ProtectKernelModules",
                     "PrivateNetwork", "RestrictAddressFamilies", "SystemCallFilter",
                     "MemoryDenyWriteExecute")


def check_unit(path, bindir):
    """Assert what the service relies on; returns the ExecStart argv."""
    unit = read_unit(path)
    svc = unit["Service"]
    one = {k: v[-1] for k, v in svc.items()}
    assert one["Type"] == "notify"  # the broker sends READY=1
    assert one["RuntimeDirectory"] == "gpushare"  # /run/gpushare, the --system socket's directory
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert one[key] == "yes", key
    assert one["ProtectSystem"] == "strict"
    assert one["LogsDirectory"] == "gpushare"  # event_log's writable place
    assert one["StateDirectory"] == "gpushare"  # the state file of `set --persist`
    assert "kill -HUP $MAINPID" in one["ExecReload"]
    # a descriptor per connection: systemd's default soft limit (1024) let
    # one user's connections exhaust them (doc/security.md)
    assert int(one.get("LimitNOFILE", "0")) >= 65536
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    for key in FORBIDDEN_IN_UNIT:
        assert key not in svc, "%s would cut the broker off" % key
    argv = shlex.split(one["ExecStart"])
    assert argv == [bindir + "/gpushare-broker", "--system"]
    return argv


def systemd_verify(path, tmp_path, exec_start):
    """systemd-analyze verify on a copy whose ExecStart is exec_start (the
    installed path need not exist here); returns its complaints."""
    copy = tmp_path / "gpushare-broker.service"
    text = re.sub(r"(?m)^ExecStart=\S+", "ExecStart=" + exec_start, open(path).read())
    copy.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(copy)], capture_output=True,
                       text=True, timeout=120)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    if not os.access("/bin/kill", os.X_OK):  # procps is the package's dependency, maybe not here
        lines = [ln for ln in lines if "/bin/kill" not in ln]
    return r.returncode, lines


def service_conf(tmp_path, example, uncomment=False, port=None):
    """The example configuration with this user's group as socket_group (the
    service's group need not exist here); uncomment=True also turns on every
    commented key, with places of this test and `port` (reserve_port())
    as metrics_port."""
    import grp
    assert port or not uncomment, "metrics_port needs a port"
    group = grp.getgrgid(os.getgid()).gr_name
    out = []
    for line in open(example):
        m = re.match(r"^#?(\w+) = (.*)$", line.strip())
        if m and (uncomment or not line.startswith("#")):
            key, value = m.groups()
            value = {"socket_group": group, "admin_group": group,
                     "gpu_access": "@%s:0-7" % group,  # (the example's users need not exist)
                     "event_log": str(tmp_path / "events.jsonl"),
                     "state_file": str(tmp_path / "broker.state"),
                     "metrics_port": str(port)}.get(key, value)
            line = "%s = %s\n" % (key, value)
        out.append(line)
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(out))
    return conf


def start_service_broker(argv, conf, run_dir, env):
    """Start argv as systemd would start the unit: in its RuntimeDirectory
    (run_dir, root-owned 0755 there) with NOTIFY_SOCKET; the socket path
    comes from GPUSHARE_BROKER because /run/gpushare is not ours to use."""
    run_dir.mkdir(mode=0o755, exist_ok=True)
    return Broker(run_dir, env, ["--config", str(conf)], cmd=argv).start()


# ---- a virtual clock for asyncio code ------------------------------------------------


class _SkippingSelector(selectors.DefaultSelector):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def select(self, timeout=None):
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:  # no timer pending: only real I/O can come
            ready = super().select(60)
            if not ready:
                raise AssertionError("a virtual clock loop waited 60 s for I/O with no timer")
            return ready
        self.clock[0] += timeout  # nothing to do until the next timer: go there at once
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock (loop.time()) moves only when the loop
    would otherwise wait: with nothing ready, it jumps to its next timer.
    A deadline in the code under test expires at exactly its virtual time,
    however loaded the machine is, and took = loop.time() - start measures
    what the code asked to wait.  For code waiting on a peer that never
    answers: real I/O that comes later than the jump is not waited for."""

    def __init__(self):
        self._clock = [0.0]
        super().__init__(selector=_SkippingSelector(self._clock))

    def time(self):
        return self._clock[0]
