"""gpushare-broker started by hand in a terminal (tmux): it says where it
listens without -v, `kill -HUP` reloads it, and closing the terminal stops
it (the hangup's SIGHUP is not a reload there)."""
import os
import shutil
import signal

import pytest

import gstest
from gstest import pid_gone, wait_until

pytestmark = pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed "
                                "(build-aux/install-deps.sh installs it)")


def broker_in_terminal(run_dir, sim, *args):
    endpoint = "ipc://%s/broker.sock" % run_dir
    term = gstest.Terminal(run_dir, dict(sim, GPUSHARE_BROKER=endpoint),
                           "exec %s %s" % (gstest.BROKER, " ".join(args)))
    return term, endpoint


def test_foreground_broker_says_where_it_listens_and_stops_with_its_terminal(short_tmp, sim):
    term, endpoint = broker_in_terminal(short_tmp, sim)
    try:
        term.wait(lambda s: "listening on %s (-v says more)" % endpoint in s, "listening on")
        pid = term.pid()
    finally:
        term.close()
    wait_until(lambda: pid_gone(pid), what="the broker to stop with its terminal")


def test_kill_hup_still_reloads_in_a_terminal(short_tmp, sim):
    term, endpoint = broker_in_terminal(short_tmp, sim, "-v")
    try:
        term.wait(lambda s: "listening on %s" % endpoint in s, "listening on")
        pid = term.pid()
        os.kill(pid, signal.SIGHUP)
        term.wait(lambda s: "reloaded" in s, "the reload")
        assert not pid_gone(pid)
    finally:
        term.close()
    wait_until(lambda: pid_gone(pid), what="the broker to stop with its terminal")
