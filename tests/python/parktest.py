"""Helpers for the parking tests (test_park_*.py): a notebook-like worker
(parkworker.py) with the real hook on the simulated GPU, driven cell by
cell through a fake launcher, so the broker sees cell busy/idle exactly as
from Jupyter; a broker with parking settings and an event log; failure
injection into the simulated driver's checkpoint API."""
import os
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


class Notebook:
    """A worker process as one notebook session: the launcher registers
    it and reports every command as a cell (busy, the command, idle)."""

    def __init__(self, name, env, tmp_path, launcher, cells=True):
        import schedtest
        self.name = name
        self.launcher = launcher
        self.err_path = tmp_path / ("%s.stderr" % name)
        env = dict(env, GPUSHARE_SESSION=name)
        with open(self.err_path, "w") as err:
            import subprocess
            import gstest
            self.proc = subprocess.Popen(
                [gstest.PYTHON, os.path.join(HERE, "parkworker.py")], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
        self.session = launcher.register(name, self.proc.pid) if cells else name
        self.cells = cells
        self.n = 0
        self._schedtest = schedtest

    @property
    def pid(self):
        return self.proc.pid

    def cell(self, line, timeout=30):
        """Runs one command as a notebook cell; returns its answer line."""
        self.n += 1
        if self.cells:
            self.launcher.cell(self.session, "busy", "%s-%d" % (self.name, self.n))
        try:
            return self.command(line, timeout)
        finally:
            if self.cells:
                self.launcher.cell(self.session, "idle", "%s-%d" % (self.name, self.n))

    def command(self, line, timeout=30):
        """Sends one command (no cell around it) and returns its answer."""
        self.send(line)
        return self.answer(timeout)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout=30):
        import select
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("%s: no answer within %.0f s; stderr: %s" % (
                    self.name, timeout, self.stderr()))
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                out = self.proc.stdout.readline()
                if not out:
                    raise AssertionError("%s ended: %s" % (self.name, self.stderr()))
                return out.strip()

    def stderr(self):
        return self.err_path.read_text() if self.err_path.exists() else ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


MIB = 1 << 20


def start_broker(tmp_path, sim, *settings):
    """A broker on the simulated GPU with parking settings ("park_idle_s=0",
    ...) and an event log (tmp_path/events.jsonl)."""
    import gstest
    import schedtest
    args = ["--event-log", str(tmp_path / "events.jsonl")]
    for s in settings:
        args += ["--set", s]
    return gstest.Broker(tmp_path, schedtest.sim_env(sim), args).start()


def events(tmp_path, kind=None):
    """The broker's event log as a list of objects (of one kind)."""
    import json
    path = tmp_path / "events.jsonl"
    if not path.exists():
        return []
    out = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in out if kind is None or e["event"] == kind]


def inject(sim, step, count=1):
    """The next `count` calls of checkpoint step `step` on the simulated GPU
    fail (gpusim_inject_checkpoint_failure), from a process of its own."""
    import subprocess
    import gstest
    code = ("import ctypes, sys; lib = ctypes.CDLL('libcuda.so.1'); "
            "sys.exit(lib.gpusim_inject_checkpoint_failure(sys.argv[1].encode(), "
            "int(sys.argv[2])))")
    subprocess.run([gstest.PYTHON, "-c", code, step, str(count)], env=sim, check=True,
                   timeout=10)



def hook_makes_room():
    """The built hook asks the broker for room when an allocation fails
    (libhook's make_room, with GPUSHARE_MAKE_ROOM_TIMEOUT_MS)."""
    import gstest
    try:
        with open(gstest.HOOK, "rb") as f:
            return b"GPUSHARE_MAKE_ROOM_TIMEOUT_MS" in f.read()
    except OSError:
        return False


@pytest.fixture
def notebooks(short_tmp):
    """start(memory, *settings) -> (broker, sim, make(name, cells=True,
    **env)): a broker with parking settings on a simulated GPU of `memory`,
    and notebooks on it, all stopped afterwards."""
    import gstest
    import schedtest
    if not hook_makes_room():
        pytest.skip("this hook does not ask the broker for room yet (libhook make_room)")
    made, state = [], {}

    def start(memory, *settings):
        sim = gstest.sim_env(short_tmp, memory=memory)
        state["sim"] = sim
        state["broker"] = b = start_broker(short_tmp, sim, *settings)
        state["launcher"] = launcher = schedtest.Client(b.endpoint)

        def make(name, cells=True, **extra):
            nb = Notebook(name, schedtest.worker_env(sim, b.endpoint, **extra), short_tmp,
                          launcher, cells)
            made.append(nb)
            return nb
        return b, sim, make

    yield start
    for nb in made:
        nb.kill()
    if "launcher" in state:
        state["launcher"].close()
    if "broker" in state:
        state["broker"].stop()
    if "sim" in state:
        gstest.unlink_sim(state["sim"])


def entry(status, session):
    """The session's entry on GPU 0 of a status object, or None."""
    for s in status["gpus"][0]["sessions"]:
        if s["id"] == session:
            return s
    return None
