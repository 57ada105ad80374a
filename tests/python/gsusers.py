"""Real accounts for the multi-user tests (issue 34).

A shared GPU server has ordinary users; the rest of the suite runs every
notebook as root, which hides what a user without privileges meets.  These
helpers create three ordinary accounts once per machine (CI runs as root and
may): gs-alice and gs-bob, who share the GPU, and gs-mallory, who tries what
a hostile local user would.  All three are in gs-users, the system broker's
socket group.  Tests that need them are skipped when not run as root.

    sim = gsusers.shared_sim(tmp_path)            # a simulated GPU all may open
    b = gsusers.system_broker(sim).start()        # --system --socket-group gs-users
    r = gsusers.run("gs-alice", [gstest.CLI, "status"], env=gsusers.env_of("gs-alice", b.env))
"""
import grp
import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile

import pytest

import gstest

GROUP = "gs-users"
ALICE, BOB, MALLORY = "gs-alice", "gs-bob", "gs-mallory"
USERS = (ALICE, BOB, MALLORY)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
    reason="needs root (to create ordinary accounts and act as them)")

_homes = {}


def accounts():
    """Creates the group and the three accounts where missing; returns
    {name: pwd entry}.  System accounts without a login shell: nothing but
    these tests acts as them."""
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", "--system", GROUP], check=True, capture_output=True)
    out = {}
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                            "--shell", "/usr/sbin/nologin", "--groups", GROUP, name],
                           check=True, capture_output=True)
        out[name] = pwd.getpwnam(name)
    return out


def uid(name):
    return pwd.getpwnam(name).pw_uid


def home(name):
    """A private home directory of the user's for this test run (Jupyter and
    the per-user socket look there)."""
    if name not in _homes:
        pw = accounts()[name]
        d = pathlib.Path(tempfile.mkdtemp(prefix="gshome-%s-" % name))
        os.chown(d, pw.pw_uid, pw.pw_gid)
        os.chmod(d, 0o700)
        _homes[name] = d
    return _homes[name]


def env_of(name, env):
    """env as the user's login would have it: HOME, USER and LOGNAME theirs,
    no runtime directory of root's."""
    e = dict(env)
    e.update({"HOME": str(home(name)), "USER": name, "LOGNAME": name})
    for k in ("XDG_RUNTIME_DIR", "JUPYTERHUB_USER", "GPUSHARE_USER"):
        e.pop(k, None)
    return e


def argv_as(name, argv):
    """argv run as the user, with the user's groups (gs-users among them)."""
    return ["setpriv", "--reuid=" + name, "--regid=" + name, "--init-groups", "--"] + \
        [str(a) for a in argv]


def run(name, argv, env, timeout=60, **kw):
    accounts()
    return subprocess.run(argv_as(name, argv), env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


def popen(name, argv, env, **kw):
    accounts()
    return subprocess.Popen(argv_as(name, argv), env=env, **kw)


def open_dir(prefix):
    """A directory every user may write to (sticky, as /tmp): where the users'
    processes put their logs."""
    d = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(d, 0o1777)
    return d


def shared_sim(memory="1G", extra=None):
    """A simulated GPU that every user's processes may attach to, its log in
    a directory all may write."""
    logs = open_dir("gssim-")
    env = gstest.sim_env(logs, memory=memory, extra=extra)
    env["GPUSHARE_SIM_SHARED"] = "1"
    return env


def system_broker(sim, args=(), event_log=False):
    """A broker as the system service runs it (--system, the socket group
    gs-users), in a directory all may enter, as systemd's RuntimeDirectory."""
    accounts()
    base = pathlib.Path(tempfile.mkdtemp(prefix="gs-sys-"))
    os.chmod(base, 0o755)
    return gstest.Broker(base, sim, ["--system", "--socket-group", GROUP] + list(args),
                         event_log=event_log)
