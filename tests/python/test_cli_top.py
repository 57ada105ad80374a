"""`gpushare top` driven as a person uses it: in a terminal (tmux, of a
fixed size), reading the screen (capture-pane) until what must appear
does, on the simulated GPU with a notebook in a cell and a program of
`gpushare run`.  The broker going away and coming back shows on the
screen; q and Ctrl-C give the terminal back as it was."""
import os
import pwd
import re
import shutil
import subprocess

import pytest

import gstest
from gstest import Proc, wait_until

pytestmark = pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed "
                                "(build-aux/install-deps.sh installs it)")

USER = pwd.getpwuid(os.getuid()).pw_name
COLUMNS = ["USER", "SESSION", "STATE", "CELL", "GPU%", "RESIDENT", "PARKED", "WAIT s", "NOTEBOOK"]


def session_rows(screen):
    """{session id: {column: value}} of the lines under a column header
    (the columns are separated by blanks; only NOTEBOOK, the last, may
    hold one)."""
    rows, under = {}, False
    for line in screen.splitlines():
        words = line.split()
        if words[:2] == ["USER", "SESSION"]:
            assert words == "USER SESSION STATE CELL GPU% RESIDENT PARKED WAIT s NOTEBOOK".split()
            under = True
        elif under and line.startswith("  ") and len(words) >= 9:
            words = line.split(None, 8)
            rows[words[1]] = dict(zip(COLUMNS, words))
        else:
            under = False
    return rows


@pytest.fixture
def scene(broker, sim, short_tmp, tmp_path):
    """A notebook nb-a (registered, 64 MiB resident, in a busy cell that
    spins) and a program `gpushare run --name job` on the test's broker."""
    launcher = gstest.Client(broker.endpoint)
    env = gstest.hook_env(sim, broker.endpoint)
    nb = gstest.Notebook("nb-a", env, tmp_path, launcher)
    job = None
    try:
        assert nb.command("alloc x %d" % (64 * gstest.MIB)) == "ok"
        launcher.cell_synced(nb.session, "busy")
        nb.send("spin 600")
        job = Proc([gstest.CLI, "run", "--name", "job", "--", gstest.PYTHON, gstest.WORKER, "loop",
                    "2000", "j"], env, tmp_path, "job")
        job.wait_line("first")
        term = gstest.Terminal(short_tmp, broker.env)
        try:
            yield term
        finally:
            term.close()
    finally:
        if job:
            job.kill()
        nb.kill()
        launcher.close()


def test_top_shows_sessions_and_follows_the_broker(scene, broker, sim, short_tmp):
    term = scene
    term.type("echo before-top; %s top" % gstest.CLI, "Enter")
    # Both hold the GPU (adaptive, their memory fits) once nb-a's boost is over.
    screen = term.wait(lambda s: [r.get("STATE") for r in session_rows(s).values()] ==
                       ["running", "running"] and {"nb-a", "job"} == set(session_rows(s)),
                       "both sessions running")
    assert re.search(r"^gpushare top  broker \S+ at %s  policy adaptive, scheduler on  "
                     r"\d\d:\d\d:\d\d   \(q quits\)$" % re.escape(broker.endpoint), screen, re.M), \
        screen
    assert "SIMULATED GPU" in screen
    assert re.search(r"^GPU 0  gpushare simulated GPU  memory \d+M of 1\.0G \[#?\.+\]  parked 0  "
                     r"2 running, 0 waiting$", screen, re.M), screen
    rows = session_rows(screen)
    nb, job = rows["nb-a"], rows["job"]
    assert nb["USER"] == USER and nb["STATE"] == "running" and nb["CELL"] == "busy"
    assert nb["RESIDENT"] == "64M" and nb["PARKED"] == "0" and nb["NOTEBOOK"] == "nb-a.ipynb"
    assert job["USER"] == USER and job["STATE"] == "running" and job["CELL"] == "-"
    assert job["NOTEBOOK"] == "(program)"
    for r in (nb, job):
        assert 0 <= int(r["GPU%"].rstrip("%")) <= 100
        float(r["WAIT s"])
    # A narrower terminal: redrawn at once, every line cut to its width.
    term.tmux("resize-window", "-t", "t", "-x", "72", "-y", "30")
    screen = term.wait(lambda s: max(len(ln) for ln in s.splitlines()) <= 72 and
                       re.search(r"^  %s +nb-a +running +busy " % USER, s, re.M) and
                       "(q quits)" not in s, "the narrow frame")
    first = screen.splitlines()[0]
    full = "gpushare top  broker 0.1.0 at %s  policy adaptive, scheduler on  " % broker.endpoint
    assert first == full[:72].rstrip() if len(full) >= 72 else first.startswith(full), first
    term.tmux("resize-window", "-t", "t", "-x", "150", "-y", "30")
    # The share over the last second, once a second frame is drawn.
    term.wait(lambda s: int(session_rows(s).get("job", {}).get("GPU%", "0%").rstrip("%")) > 0,
              "the job's share of the GPU")

    # The broker goes away: said on the screen, which keeps being redrawn.
    broker.stop()
    term.wait(lambda s: "broker not running: no broker is running at " + broker.endpoint in s,
              "broker not running")
    # It comes back: the program's hook joins it again, and top shows it.
    again = gstest.Broker(short_tmp, sim).start()
    try:
        term.wait(lambda s: "job" in session_rows(s), "the job under the new broker")
        # q quits and gives back the shell's screen and terminal mode.
        term.type("q")
        screen = term.wait(lambda s: "before-top" in s and "gpushare top" not in s.replace(
            "%s top" % gstest.CLI, ""), "the shell's screen again")
        # (the shell's output, "stty-done-42", is not the command's echo)
        term.type("stty -a > %s/stty.txt 2>&1; echo stty-done-$((40 + 2))" % short_tmp, "Enter")
        term.wait(lambda s: "stty-done-42" in s, "stty")
        stty = (short_tmp / "stty.txt").read_text().split()
        assert "icanon" in stty and "echo" in stty, (stty, term.screen())

        # Ctrl-C does the same.
        term.type("clear; %s top" % gstest.CLI, "Enter")
        term.wait(lambda s: "job" in session_rows(s), "top again")
        term.type("C-c")
        # What is typed next reaches the shell only once top has gone.
        term.type("stty -a > %s/stty2.txt 2>&1; echo stty2-done-$((40 + 2))" % short_tmp, "Enter")
        term.wait(lambda s: "stty2-done-42" in s, "the shell after Ctrl-C")
        stty = (short_tmp / "stty2.txt").read_text().split()
        assert "icanon" in stty and "echo" in stty, (stty, term.screen())
    finally:
        again.stop()


def test_top_once(broker, sim, tmp_path):
    job = Proc([gstest.CLI, "run", "--name", "job1", "--", gstest.PYTHON, gstest.WORKER, "loop",
                "2000", "j"], gstest.hook_env(sim, broker.endpoint), tmp_path, "job")
    try:
        job.wait_line("first")
        wait_until(lambda: "job1" in broker.sessions(), what="session job1")
        r = broker.cli("top", "--once")
        assert "\033" not in r.stdout  # no escapes for a script
        rows = session_rows(r.stdout)
        assert rows["job1"]["NOTEBOOK"] == "(program)", r.stdout
        # Without a terminal, `status --watch` (= top) prints plain frames, one after another.
        watch = Proc([gstest.CLI, "status", "--watch"], broker.env, tmp_path, "watch")
        try:
            watch.wait_count("gpushare top  broker", 2)
            assert watch.wait_line("  %s " % USER).split()[1] == "job1"
        finally:
            watch.kill()
    finally:
        job.kill()
    r = subprocess.run([gstest.CLI, "--broker", str(tmp_path / "none.sock"), "top", "--once"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("gpushare top: no broker is running at ipc://"), r.stderr


@pytest.mark.parametrize("args, text", [
    (["--interval", "0"], 'gpushare top: --interval "0": a number of seconds'),
    (["--interval"], 'gpushare top: "--interval" needs a value'),
    (["--bogus"], 'gpushare top: unknown option "--bogus"'),
    (["extra"], 'gpushare top: unexpected argument "extra"'),
])
def test_top_usage(args, text):
    r = subprocess.run([gstest.CLI, "top"] + args, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and text in r.stderr, r.stderr
