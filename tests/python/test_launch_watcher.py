"""gpushare-launch's cell watcher against a stand-in kernel and a stand-in
broker, so every case is deterministic: registration, busy/idle pairing,
forged and unsigned IOPub messages, a missing or restarted broker, bad
connection files, signals, descriptors, and dying with the kernel.

The stand-in kernel (FAKE_KERNEL, written to tmp_path) reads its
connection file like ipykernel, binds an XPUB as its IOPub (so it knows
when the watcher has subscribed), publishes what the test writes to its
stdin, signed with the connection key (or not, or with another key), and
counts the SIGINTs it gets.  It also says which children it has when it
starts: gpushare-launch forks the watcher before it execs the kernel, so a
watcher would be among them.

Checks that something did not happen wait for a later event that would
have come after it: a later message through the same watcher, a
connection the stand-in broker accepts after any earlier one, the
watcher's retries in its debug log.
"""
import json
import os
import signal
import subprocess
import uuid

import pytest

import gstest
from gstest import all_watchers, pid_gone, wait_until, watchers_of

FAKE_KERNEL = r'''
import hashlib, hmac, json, os, signal, sys, time, uuid
import zmq

conn = sys.argv[sys.argv.index("-f") + 1]
info = json.load(open(conn))
print("children", open("/proc/self/task/%d/children" % os.getpid()).read().split(),
      flush=True)
key = info["key"].encode()
sigints = 0
def on_int(signum, frame):
    global sigints
    sigints += 1
    print("sigint", sigints, flush=True)
signal.signal(signal.SIGINT, on_int)

ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
# The test's listening socket on iopub_port (no moment between choosing
# the port and binding it): ZMQ_USE_FD takes it as it is.
pub.setsockopt(zmq.USE_FD, int(os.environ["FAKE_KERNEL_IOPUB_FD"]))
pub.bind("tcp://127.0.0.1:%d" % info["iopub_port"])
print("env", json.dumps({k: v for k, v in os.environ.items() if k.startswith("GPUSHARE_")}),
      flush=True)
print("bound", flush=True)

def send(msg_type, parent_type, parent_id, content, signer=key, sig=None):
    header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": "s",
              "username": "u", "date": "2024-01-01T00:00:00Z", "version": "5.3"}
    parent = {"msg_id": parent_id, "msg_type": parent_type} if parent_id else {}
    frames = [json.dumps(x).encode() for x in (header, parent, {}, content)]
    if sig is None:
        h = hmac.new(signer, digestmod=hashlib.sha256)
        for f in frames:
            h.update(f)
        sig = h.hexdigest() if signer else ""
    pub.send_multipart([b"kernel.x." + msg_type.encode(), b"<IDS|MSG>", sig.encode()] + frames)

poller = zmq.Poller()
poller.register(pub, zmq.POLLIN)
poller.register(sys.stdin.fileno(), zmq.POLLIN)
while True:
    try:
        # A timeout, so that Python runs the SIGINT handler soon even when
        # the signal landed on one of ZeroMQ's threads.
        ready = dict(poller.poll(20))
    except zmq.ZMQError:
        continue
    if pub in ready:
        if pub.recv()[:1] == b"\x01":
            print("subscribed", flush=True)
    if sys.stdin.fileno() in ready:
        line = sys.stdin.readline()
        if not line:
            break
        cmd, *args = line.split()
        if cmd in ("busy", "idle"):
            send("status", "execute_request", args[0], {"execution_state": cmd})
        elif cmd == "other":      # a kernel_info_request's busy
            send("status", "kernel_info_request", args[0], {"execution_state": "busy"})
        elif cmd == "output":     # a big output on IOPub
            send("stream", "execute_request", args[0], {"name": "stdout", "text": "x" * 100000})
        elif cmd == "forged":     # right format, wrong key
            send("status", "execute_request", args[0], {"execution_state": args[1]},
                 signer=b"not-the-key")
        elif cmd == "unsigned":
            send("status", "execute_request", args[0], {"execution_state": args[1]}, sig="")
        elif cmd == "exit":
            sys.exit(int(args[0]))
        print("done", cmd, flush=True)
'''


class ConnFile(os.PathLike):
    """A connection file, and the listening socket on its iopub_port that
    the stand-in kernel takes over."""

    def __init__(self, path, listener):
        self.path, self.listener = path, listener

    def __fspath__(self):
        return str(self.path)

    __str__ = __fspath__


def write_conn(path, key="watch-key-0123456789", **over):
    listener = gstest.bound_listener()
    iopub = listener.getsockname()[1]
    # The other channels' ports are there as in a kernel's file; nothing
    # here binds or connects to them, so any distinct numbers will do.
    info = {"shell_port": iopub + 1, "iopub_port": iopub, "stdin_port": iopub + 2,
            "control_port": iopub + 3, "hb_port": iopub + 4, "ip": "127.0.0.1",
            "key": key, "transport": "tcp", "signature_scheme": "hmac-sha256",
            "kernel_name": "shared-gpu"}
    info.update(over)
    info = {k: v for k, v in info.items() if v is not None}
    path.write_text(json.dumps(info))
    return ConnFile(path, listener)


class FakeKernel(gstest.Proc):
    """gpushare-launch -- python3 FAKE_KERNEL -f CONN, its lines collected."""

    def __init__(self, tmp_path, env, conn, launch_args=(), name="kernel", pass_fds=()):
        script = tmp_path / "fake_kernel.py"
        script.write_text(FAKE_KERNEL)
        fd = conn.listener.fileno()
        self.iopub_socket = os.readlink("/proc/self/fd/%d" % fd)  # "socket:[inode]"
        # --no-hook: these tests are about the watcher, not the hook.
        super().__init__([gstest.LAUNCH, "--no-hook"] + list(launch_args) +
                         ["--", gstest.PYTHON, str(script), "-f", str(conn)],
                         dict(env, FAKE_KERNEL_IOPUB_FD=str(fd)), tmp_path,
                         "%s-%s" % (name, uuid.uuid4().hex[:6]), start_new_session=True,
                         pass_fds=(fd,) + tuple(pass_fds))
        conn.listener.close()  # the kernel has its own copy

    def expect(self, prefix, timeout=30.0):
        return self.wait_line(prefix, timeout)

    def do(self, line):
        """Has the kernel do line (publish, exit...) and waits until it has."""
        n = self.count("done")
        self.send(line)
        self.wait_count("done", n + 1)

    def env(self):
        return json.loads(self.expect("env ")[4:])


@pytest.fixture
def kenv(sim, fb):
    """What a notebook server gives a kernel, with the stand-in broker
    (overrides conftest's kenv, which has the real one)."""
    return gstest.kernel_env(sim, GPUSHARE_BROKER=fb.endpoint, USER="x")


@pytest.fixture
def kernels():
    started = []
    yield started
    for k in started:
        k.kill()


def start(kernels, tmp_path, env, conn=None, **kw):
    if conn is None:
        conn = write_conn(tmp_path / ("kernel-%s.json" % uuid.uuid4()))
    k = FakeKernel(tmp_path, env, conn, **kw)
    kernels.append(k)
    return k


def cells(fb, after=0):
    return [(r["msg"]["state"], r["msg"]["msg_id"]) for r in fb.messages("cell", after=after)]


def test_registers_with_kernel_id_user_notebook_and_pid(tmp_path, kenv, fb, kernels):
    kid = str(uuid.uuid4())
    env = dict(kenv, JUPYTERHUB_USER="alice", JPY_SESSION_NAME="work/train.ipynb")
    k = start(kernels, tmp_path, env, conn=write_conn(tmp_path / ("kernel-%s.json" % kid)))
    hello = fb.wait_for("hello")["msg"]
    assert hello["role"] == "launcher"
    assert hello["session"] == kid
    reg = fb.wait_for("register")["msg"]
    assert reg["kernel_id"] == kid
    assert reg["user"] == "alice"
    assert reg["notebook"] == "work/train.ipynb"
    assert reg["pid"] == k.proc.pid  # the launcher's pid, which the kernel keeps
    kenv_seen = k.env()
    assert kenv_seen["GPUSHARE_SESSION"] == kid
    assert kenv_seen["GPUSHARE_KERNEL_ID"] == kid
    # No warning in the kernel's log when the broker is there.
    k.expect("bound")
    assert "warn" not in k.stderr()


def test_provisioner_kernel_id_and_user_win(tmp_path, kenv, fb, kernels):
    env = dict(kenv, GPUSHARE_KERNEL_ID="kid-from-provisioner", GPUSHARE_USER="bob",
               JUPYTERHUB_USER="alice")
    conn = write_conn(tmp_path / "tmpab12cd.json")  # jupyter_client's temporary name
    k = start(kernels, tmp_path, env, conn=conn)
    reg = fb.wait_for("register")["msg"]
    assert reg["kernel_id"] == "kid-from-provisioner"
    assert reg["user"] == "bob"
    assert "notebook" not in reg
    assert k.env()["GPUSHARE_SESSION"] == "kid-from-provisioner"


def test_temporary_connection_file_name_is_the_kernel_id(tmp_path, kenv, fb, kernels):
    k = start(kernels, tmp_path, kenv, conn=write_conn(tmp_path / "tmpab12cd.json"))
    assert fb.wait_for("register")["msg"]["kernel_id"] == "tmpab12cd"
    assert k.env()["GPUSHARE_SESSION"] == "tmpab12cd"


def test_busy_idle_of_execute_requests_become_cells(tmp_path, kenv, fb, kernels):
    k = start(kernels, tmp_path, kenv)
    k.expect("subscribed")
    fb.wait_for("register")
    n = fb.count()
    k.do("other k1")          # a kernel_info_request's status: not a cell
    k.do("output c1")         # outputs are not cells either
    k.do("busy c1")
    fb.wait_for("cell", after=n, pred=lambda m: m["state"] == "busy")
    k.do("idle c1")
    fb.wait_for("cell", after=n, pred=lambda m: m["state"] == "idle")
    k.do("busy c2")
    k.do("idle stale")        # an idle for another request than the running one
    k.do("idle c2")
    fb.wait_for("cell", after=n, pred=lambda m: m["msg_id"] == "c2" and m["state"] == "idle")
    assert cells(fb, n) == [("busy", "c1"), ("idle", "c1"), ("busy", "c2"), ("idle", "c2")]
    session = fb.wait_for("register")["msg"]["kernel_id"]
    assert all(r["msg"]["session"] == session for r in fb.messages("cell"))


def test_forged_and_unsigned_messages_are_ignored(tmp_path, kenv, fb, kernels):
    k = start(kernels, tmp_path, kenv)
    k.expect("subscribed")
    fb.wait_for("register")
    n = fb.count()
    k.do("forged f1 busy")
    k.do("unsigned u1 busy")
    k.do("forged f1 idle")
    k.do("busy real")         # a signed message after them still counts
    k.do("idle real")
    # The watcher reads IOPub in order and tells the broker in order: by
    # the last cell, whatever it made of the others has arrived too.
    fb.wait_for("cell", after=n, pred=lambda m: m["state"] == "idle")
    assert cells(fb, n) == [("busy", "real"), ("idle", "real")]
    err = k.stderr()
    assert err.count("signature is wrong") == 1, err  # one warning, not one per message
    assert "watch-key" not in err


def test_empty_key_means_unsigned_messages(tmp_path, kenv, fb, kernels):
    conn = write_conn(tmp_path / "kernel-nokey.json", key="")
    k = start(kernels, tmp_path, kenv, conn=conn)
    k.expect("subscribed")
    fb.wait_for("register")
    k.do("busy e1")
    assert fb.wait_for("cell")["msg"]["msg_id"] == "e1"


def test_key_never_leaves_the_launcher(tmp_path, kenv, fb, kernels):
    k = start(kernels, tmp_path, kenv)
    k.expect("subscribed")
    fb.wait_for("register")
    k.do("busy c1")
    fb.wait_for("cell")
    key = "watch-key-0123456789"
    assert all(key not in json.dumps(r["msg"]) for r in fb.records)
    (w,) = wait_until(lambda: watchers_of(k.proc.pid), what="the watcher")
    for pid in (w, k.proc.pid):
        for what in ("cmdline", "environ"):
            with open("/proc/%d/%s" % (pid, what), "rb") as f:
                assert key.encode() not in f.read()


def test_watcher_sheds_descriptors_and_has_its_own_group(tmp_path, kenv, fb, kernels):
    r, w = os.pipe()  # an inherited descriptor the watcher must not keep
    try:
        k = start(kernels, tmp_path, kenv, pass_fds=(w,))
        k.expect("subscribed")
        (watcher,) = wait_until(lambda: watchers_of(k.proc.pid), what="the watcher")
        fds = {int(fd): os.readlink("/proc/%d/fd/%s" % (watcher, fd))
               for fd in os.listdir("/proc/%d/fd" % watcher)}
        assert fds[0] == "/dev/null" and fds[1] == "/dev/null"
        assert fds[2] == os.readlink("/proc/%d/fd/2" % k.proc.pid)  # the kernel's log
        pipe = os.readlink("/proc/self/fd/%d" % w)
        assert pipe not in fds.values(), fds
        assert k.iopub_socket not in fds.values(), fds  # the kernel's, inherited too
        # Beyond stdio, only what the watcher made: ZeroMQ's sockets and
        # eventfds, its signalfd.
        assert all(v.startswith(("socket:", "anon_inode:")) for fd, v in fds.items() if fd > 2), fds
        assert os.getpgid(watcher) == watcher != os.getpgid(k.proc.pid)
    finally:
        os.close(r)
        os.close(w)


def test_sigint_to_the_group_reaches_the_kernel_once(tmp_path, kenv, fb, kernels):
    k = start(kernels, tmp_path, kenv)
    k.expect("subscribed")
    (w,) = wait_until(lambda: watchers_of(k.proc.pid), what="the watcher")
    os.killpg(k.proc.pid, signal.SIGINT)   # what the server's interrupt does
    k.expect("sigint 1")
    os.kill(k.proc.pid, signal.SIGINT)     # interrupt_mode signal, to the pid
    k.expect("sigint 2")
    os.kill(w, signal.SIGINT)              # even aimed at the watcher itself
    # The watcher's signal is pending when kill() returns.  Two messages
    # through the watcher (each after the other has reached the broker)
    # mean it has gone round its loop since; a command to the kernel after
    # that is answered only once the kernel has run its SIGINT handler for
    # anything sent to it before.
    fb.wait_for("register")
    n = fb.count()
    k.do("busy after")
    assert fb.wait_for("cell", after=n)["msg"]["msg_id"] == "after"
    k.do("idle after")
    fb.wait_for("cell", after=n, pred=lambda m: m["state"] == "idle")
    k.do("other check")
    assert k.count("sigint") == 2, k.lines
    assert watchers_of(k.proc.pid) == [w]


def test_kernel_exit_status_and_unregister(tmp_path, kenv, fb, kernels):
    k = start(kernels, tmp_path, kenv)
    k.expect("subscribed")
    reg = fb.wait_for("register")["msg"]
    (w,) = wait_until(lambda: watchers_of(k.proc.pid), what="the watcher")
    k.send("exit 3")
    assert k.proc.wait(30) == 3
    assert fb.wait_for("unregister")["msg"]["session"] == reg["kernel_id"]
    wait_until(lambda: pid_gone(w), what="the watcher to exit")


def test_sigkill_of_the_kernel_ends_the_watcher(tmp_path, kenv, fb, kernels):
    k = start(kernels, tmp_path, kenv)
    k.expect("subscribed")
    reg = fb.wait_for("register")["msg"]
    (w,) = wait_until(lambda: watchers_of(k.proc.pid), what="the watcher")
    os.killpg(k.proc.pid, signal.SIGKILL)  # the server's kill: the whole group
    k.proc.wait(30)
    wait_until(lambda: pid_gone(w), what="the watcher to exit")
    # Out of the kernel's group, the watcher outlived the kill long enough to say so.
    assert fb.wait_for("unregister")["msg"]["session"] == reg["kernel_id"]


def warnings(k):
    """The watcher's warnings (and errors): what it says at its default level."""
    return [l for l in k.stderr().splitlines() if ": warn: " in l or ": error: " in l]


def test_broker_missing_one_warning_then_background_registration(tmp_path, short_tmp, kenv,
                                                                 kernels, fake_brokers):
    endpoint = "ipc://%s" % (short_tmp / "late.sock")
    # GPUSHARE_LOG=debug: each failed attempt after the first says so.
    env = dict(kenv, GPUSHARE_BROKER=endpoint, GPUSHARE_LOG="debug")
    k = start(kernels, tmp_path, env)
    k.expect("subscribed")                    # the kernel runs meanwhile
    k.do("busy early")                        # a cell started before the broker came
    wait_until(lambda: "broker attempt 3 failed" in k.stderr(), what="three retries")
    assert len(warnings(k)) == 1, k.stderr()
    assert "no gpushare broker" in warnings(k)[0] and "late.sock" in warnings(k)[0]
    late = fake_brokers(endpoint)
    reg = late.wait_for("register")["msg"]
    # It learns about the cell that started while it was away.
    cell = late.wait_for("cell")["msg"]
    assert (cell["state"], cell["msg_id"]) == ("busy", "early")
    assert cell["session"] == reg["kernel_id"]
    assert len(warnings(k)) == 1, k.stderr()


def test_broker_restart_registers_again(tmp_path, kenv, fb, kernels, fake_brokers):
    k = start(kernels, tmp_path, kenv)
    k.expect("subscribed")
    fb.wait_for("register")
    fb.stop()
    again = fake_brokers(fb.endpoint)
    assert again.wait_for("hello")["msg"]["role"] == "launcher"
    again.wait_for("register")
    k.do("busy b1")
    assert again.wait_for("cell")["msg"]["msg_id"] == "b1"


@pytest.mark.parametrize("content, field", [
    (None, None),                                               # no file at all
    ('{"ip": "127.0.0.1", "key": "k"}', "iopub_port"),
    ('{"ip": "127.0.0.1", "key": "k", "iopub_port": "x"}', "iopub_port"),
    ('{"iopub_port": 5, "key": "k"}', "ip"),
    ('{"ip": "127.0.0.1", "iopub_port": 5}', "key"),
    ('{"ip": "127.0.0.1", "iopub_port": 5, "key": "k", "signature_scheme": "md5"}',
     "signature_scheme"),
    ('{"ip": "127.0.0.1", ', None),                             # not JSON
])
def test_bad_connection_file_names_file_and_field_and_kernel_still_runs(tmp_path, kenv, fb,
                                                                        content, field):
    conn = tmp_path / "kernel-bad.json"
    if content is not None:
        conn.write_text(content)
    # The kernel says its session, and which children it has: the launcher
    # forks a watcher before it execs the kernel, so one would be there.
    kernel = ('echo "$GPUSHARE_SESSION"; read c < /proc/$$/task/$$/children; '
              'echo "children:$c"; exit 4')
    cmd = [gstest.LAUNCH, "--", "sh", "-c", kernel, "-f", str(conn)]
    r = subprocess.run(cmd, env=kenv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 4                     # the kernel ran, its status came back
    assert r.stdout.split("\n")[:2] == ["bad", "children:"], r.stdout  # no watcher
    lines = [l for l in r.stderr.splitlines() if l]
    assert len(lines) == 1, r.stderr
    assert str(conn) in lines[0]
    if field:
        assert 'field "%s"' % field in lines[0]
    elif content is None:
        assert "No such file" in lines[0]
    else:
        assert "not valid JSON" in lines[0]
    assert "starts without its cells watched" in lines[0]
    assert fb.connections_before_mine() == 0     # and none ever connected
    # --strict: the same problem stops the launch.
    r = subprocess.run([gstest.LAUNCH, "--strict"] + cmd[1:], env=kenv, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert str(conn) in r.stderr and "--strict" in r.stderr


def test_no_connection_file_in_command_runs_unwatched(tmp_path, kenv, fb):
    r = subprocess.run([gstest.LAUNCH, "--", "sh", "-c", "exit 0"], env=kenv,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == ""
    r = subprocess.run([gstest.LAUNCH, "--strict", "--", "true"], env=kenv,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "names no connection file" in r.stderr


def test_exec_failure_leaves_no_watcher(tmp_path, kenv, fb):
    conn = write_conn(tmp_path / "kernel-x1.json")
    before = set(all_watchers())
    r = subprocess.run([gstest.LAUNCH, "--", "/nonexistent/kernel", "-f", str(conn)], env=kenv,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 127
    # The watcher was forked and left once the exec had failed: gone, and
    # it never connected (the broker accepts any earlier connection first).
    wait_until(lambda: set(all_watchers()) <= before, what="no new watcher")
    assert fb.connections_before_mine() == 0


def test_no_watch_option(tmp_path, kenv, fb, kernels):
    k = start(kernels, tmp_path, kenv, launch_args=["--no-watch"])
    assert k.expect("children ") == "children []"  # no watcher was forked
    k.expect("bound")
    assert watchers_of(k.proc.pid) == []
    assert fb.connections_before_mine() == 0
