"""`gpushare run -- COMMAND`: any program under the hook, as a session of
its own, on the simulated GPU.  It is gated like a notebook (it waits
while another session holds the GPU, and the waiting line names the
holder as a program), it keeps its pid and exit status (exec, no
wrapper), and it fails open: without a broker or without the hook
library the command runs all the same."""
import os
import pwd
import subprocess

import pytest

import gstest
from gstest import Proc, wait_until

pytestmark = [pytest.mark.sim(concurrency=4), pytest.mark.broker("--policy", "exclusive")]


def run_proc(env, tmp_path, name, *args):
    """`gpushare run ARGS` with its lines read as they come."""
    return Proc([gstest.CLI, "run"] + list(args), env, tmp_path, name)


def worker(mode, label):
    return [gstest.PYTHON, gstest.WORKER, mode, "2000", label]


def test_run_is_a_named_gated_session(broker, sim, tmp_path):
    env = gstest.hook_env(sim, broker.endpoint)
    holder = run_proc(env, tmp_path, "holder", "--name", "trainer", "--", *worker("loop", "a"))
    try:
        holder.wait_line("first")
        # exec: the session's process is the one `gpushare run` started.
        s = wait_until(lambda: broker.sessions().get("trainer"), what="session trainer")
        assert holder.pid in s["pids"]
        assert s["kind"] == "program" and s["state"] == "running"
        assert s["user"] == pwd.getpwuid(os.getuid()).pw_name
        # A second program waits while the first holds the GPU (exclusive).
        second = run_proc(env, tmp_path, "second", "--", *worker("loop", "b"))
        try:
            name = "python3-%d" % second.pid  # the default: the program's name and pid
            wait_until(lambda: broker.sessions().get(name, {}).get("state") == "waiting",
                       what="the second program waiting")
            assert not second.printed("first")
            text = broker.cli("status").stdout
            assert "trainer" in text and "(program)" in text
            # The hook's waiting line names the holder as a program, with its owner.
            wait_until(lambda: "held by %s's program trainer" % s["user"] in second.stderr(),
                       what="the waiting line")
            holder.kill()
            second.wait_line("first")  # the GPU went to the one that waited
        finally:
            second.kill()
    finally:
        holder.kill()
    assert not gstest.overlaps(gstest.kernels(sim))


def test_run_fails_open_without_broker(sim, tmp_path):
    env = gstest.hook_env(sim, "ipc://%s/none.sock" % tmp_path)
    p = run_proc(env, tmp_path, "alone", "--name", "alone", "--", *worker("steps", "a"))
    try:
        p.send("run 3")
        p.wait_line("done 3")
        assert "no gpushare broker at" in p.stderr()
        assert "running without GPU sharing" in p.stderr()
    finally:
        p.kill()


def test_run_exit_status_environment_and_missing_hook(sim, tmp_path):
    env = gstest.hook_env(sim, "ipc://%s/none.sock" % tmp_path, LD_PRELOAD="libm.so.6")
    show = ["sh", "-c", 'echo "$GPUSHARE_SESSION|$LD_PRELOAD|$GPUSHARE_BROKER"; exit 7']
    r = subprocess.run([gstest.CLI, "--broker", str(tmp_path / "b.sock"), "run", "--name", "job",
                        "--"] + show, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 7
    # The hook goes first; what was preloaded stays.
    assert r.stdout.strip() == "job|%s:libm.so.6|ipc://%s/b.sock" % (gstest.HOOK, tmp_path)
    # No hook library: said once, and the command runs anyway, ungated.
    r = subprocess.run([gstest.CLI, "run", "--"] + show, env=dict(env, GPUSHARE_HOOK="/nope.so"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 7
    assert r.stdout.startswith("sh-")
    assert "gpushare run: warning: the hook /nope.so: No such file or directory; " \
           "sh runs without GPU sharing" in r.stderr


@pytest.mark.parametrize("args, rc, text", [
    ([], 2, "gpushare run: no command given"),
    (["--name", "a b", "true"], 2, 'gpushare run: --name "a b": use 1 to 128 letters'),
    (["--bogus", "true"], 2, 'gpushare run: unknown option "--bogus"'),
    (["--", "/nonexistent/prog"], 127, 'gpushare run: cannot run "/nonexistent/prog"'),
    (["--", "/"], 126, 'gpushare run: cannot run "/"'),
])
def test_run_usage(sim, args, rc, text):
    r = subprocess.run([gstest.CLI, "run"] + args, env=sim, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == rc, r.stderr
    assert text in r.stderr
