"""The fixtures that more than one test file uses (a fixture that one file
alone needs stays in that file); the helpers they are built from are in
gstest.py.  Markers configure them for a file (pytestmark) or a test:

    @pytest.mark.sim(memory="64M", concurrency=4)   the simulated GPU
    @pytest.mark.broker("--policy", "exclusive", config="key = value")
                                                     the real broker's arguments
                                                     (and configuration file)
    @pytest.mark.fake_broker(auto_grant=True)        the stand-in broker's options
"""
import os
import pathlib
import shutil
import signal
import tempfile

import pytest

import gstest
from fakebroker import FakeBroker


def _plain_start():
    """What every program a test starts inherits is the same however the
    suite was started: a job in the background of a non-interactive shell
    ignores SIGINT and SIGQUIT (and every child would, through exec), and a
    closed stdin would hand fd 0 to the next file opened.  Ctrl-C typed to
    `gpushare top` in a terminal, or a SIGINT a test sends, must work."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    try:
        os.fstat(0)
    except OSError:
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd != 0:
            os.dup2(fd, 0)
            os.close(fd)


_plain_start()


def pytest_configure(config):
    for line in ("sim(memory='1G', concurrency=None): the simulated GPU of the `sim` fixture",
                 "broker(*args, config=None): the arguments (and the configuration file's "
                 "text) of the `broker` fixture's gpushare-broker",
                 "fake_broker(**options): the options of the `fb` fixture's FakeBroker"):
        config.addinivalue_line("markers", line)


def _marker(request, name):
    m = request.node.get_closest_marker(name)
    return (m.args, m.kwargs) if m else ((), {})


def _factory(make, end):
    """The body of a factory fixture: yields a function that makes things
    with make(...), and ends each of them with end(thing) afterwards."""
    made = []

    def start(*args, **kwargs):
        made.append(make(*args, **kwargs))
        return made[-1]

    yield start
    for thing in made:
        end(thing)


@pytest.fixture
def short_tmp():
    """A private directory with a short path: ipc socket paths hold 107 bytes."""
    d = tempfile.mkdtemp(prefix="gs")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def sim(request, tmp_path):
    """Environment on a private simulated GPU (1 GiB unless the sim marker
    says otherwise), removed afterwards."""
    _, kw = _marker(request, "sim")
    env = gstest.sim_env(tmp_path, **kw)
    yield env
    gstest.unlink_sim(env)


@pytest.fixture
def broker(request, short_tmp, sim):
    """A gpushare-broker on the simulated GPU, with an event log
    (broker.events()), in a private short directory."""
    args, kw = _marker(request, "broker")
    if kw.get("config"):
        (short_tmp / "broker.conf").write_text(kw["config"] + "\n")
        args = ["--config", str(short_tmp / "broker.conf")] + list(args)
    b = gstest.Broker(short_tmp, sim, args, event_log=True).start()
    yield b
    b.stop()


@pytest.fixture
def kenv(broker):
    """The broker's environment as a notebook server passes it to a kernel."""
    return gstest.kernel_env(broker.env)


@pytest.fixture
def endpoint(short_tmp):
    """A private ipc endpoint for a stand-in broker."""
    return "ipc://%s/b.sock" % short_tmp


@pytest.fixture
def fake_brokers(endpoint):
    """start(endpoint=the test's, **options) starts a FakeBroker; all are
    stopped afterwards."""
    yield from _factory(lambda at=None, **kw: FakeBroker(at or endpoint, **kw).start(),
                        FakeBroker.stop)


@pytest.fixture
def fb(request, fake_brokers):
    """A FakeBroker on the test's endpoint (options from the fake_broker
    marker)."""
    _, kw = _marker(request, "fake_broker")
    return fake_brokers(**kw)


@pytest.fixture
def probe(tmp_path, sim, endpoint):
    """probe(steps, name="probe", **env) runs hook_probe with the hook
    preloaded, pointed at the test's endpoint, idle release off unless
    env sets it; every probe is killed at the end.  GS_HOOK_DEBUG=1 in the
    environment turns on the hook's debug log (in each probe's stderr file)."""
    gstest.ensure_probe()

    def start(steps, name="probe", **extra):
        extra.setdefault("GPUSHARE_IDLE_RELEASE_MS", 0)
        if os.environ.get("GS_HOOK_DEBUG"):
            extra.setdefault("GPUSHARE_LOG", "debug")
        return gstest.Probe(tmp_path, gstest.hook_env(sim, endpoint, **extra), steps, name)

    yield from _factory(start, gstest.Probe.kill)


@pytest.fixture
def workers(broker, sim, tmp_path):
    """workers(name, us=2000, mode="loop", **env) starts a gpuworker.py
    (hooked) against the test's broker; all are killed afterwards."""
    def start(name, us=2000, mode="loop", **extra):
        return gstest.Worker(gstest.hook_env(sim, broker.endpoint, **extra), mode, us, name,
                             tmp_path)

    yield from _factory(start, gstest.Worker.kill)


@pytest.fixture
def notebooks(short_tmp):
    """start(memory, *settings, **sim_env) -> (broker, sim, make(name,
    cells=True, **env)): a broker with parking settings on a simulated GPU
    of `memory` (sim_env: more of the broker's environment), and notebooks
    (gstest.Notebook) on it, all stopped afterwards."""
    made, state = [], {}

    def start(memory, *settings, **sim_extra):
        sim = gstest.sim_env(short_tmp, memory=memory, concurrency=4, extra=sim_extra)
        state["sim"] = sim
        state["broker"] = b = gstest.park_broker(short_tmp, sim, *settings)
        state["launcher"] = launcher = gstest.Client(b.endpoint)

        def make(name, cells=True, **extra):
            nb = gstest.Notebook(name, gstest.hook_env(sim, b.endpoint, **extra), short_tmp,
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
