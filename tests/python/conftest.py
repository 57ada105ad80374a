import pathlib
import shutil
import tempfile

import pytest

import gstest


@pytest.fixture
def sim(tmp_path):
    """Environment on a private simulated GPU (1 GiB), removed afterwards."""
    env = gstest.sim_env(tmp_path)
    yield env
    gstest.unlink_sim(env)


@pytest.fixture
def broker(tmp_path, sim):
    b = gstest.Broker(tmp_path, sim).start()
    yield b
    b.stop()


@pytest.fixture
def short_tmp():
    """A private directory with a short path: ipc socket paths hold 107 bytes."""
    d = tempfile.mkdtemp(prefix="gs")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def endpoint(short_tmp):
    """A private ipc endpoint for a stand-in broker (tests of the hook)."""
    return "ipc://%s/b.sock" % short_tmp


@pytest.fixture
def workers(broker, sim, tmp_path):
    """Start schedtest workers (hooked processes) against the test's broker;
    all are killed afterwards."""
    from schedtest import Worker, worker_env

    started = []

    def start(name, us=2000, mode="loop", **extra):
        w = Worker(worker_env(sim, broker.endpoint, **extra), mode, us, name, tmp_path)
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()
