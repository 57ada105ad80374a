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
