"""What a hostile local user could do to gpushare, and what stops it
(doc/security.md).  Each test is the regression test of one finding of the
audit in issue 15; the number is the finding's.  Most run as one user: a
directory the test opens to everyone (chmod 0777) plays the other user's
doing.  Those that need a second account run as root and act as `nobody`
through setpriv; they are skipped otherwise."""
import json
import os
import pathlib
import pwd
import resource
import shutil
import signal
import socket
import subprocess
import tempfile

import pytest
import zmq
import zmq.utils.monitor

import gstest
from gstest import Client

NOBODY = 65534
TIMEOUT_MS = 30000  # only bounds waits for what must happen


def root_only():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to act as a second user through setpriv)")


def as_nobody(argv):
    return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", "--"] + \
        list(argv)


def cli(*args, env=None, user=None):
    argv = [gstest.CLI] + list(args)
    return subprocess.run(as_nobody(argv) if user == "nobody" else argv, capture_output=True,
                          text=True, timeout=60, env=env)


def open_dir(parent, name="open"):
    """A directory anyone may write to: where another user could have put a
    socket of their own."""
    d = parent / name
    d.mkdir()
    os.chmod(d, 0o777)
    return d


def dealer(endpoint, reconnect=True):
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
    if not reconnect:
        s.setsockopt(zmq.RECONNECT_IVL, -1)
    return s


def wait_disconnected(mon):
    """Waits for the DISCONNECTED event on a socket's monitor."""
    while True:
        assert mon.poll(TIMEOUT_MS), "the connection was not dropped"
        ev = zmq.utils.monitor.recv_monitor_message(mon)
        if ev["event"] == zmq.EVENT_DISCONNECTED:
            return


def hello(seq=1, role="cli"):
    return json.dumps({"v": 1, "type": "hello", "seq": seq, "role": role,
                       "pid": os.getpid()}).encode()


def nofile(pid):
    """(soft, hard) open-file limits of a process."""
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3]), int(line.split()[4])
    raise AssertionError("no open-file limit in /proc/%d/limits" % pid)


def shared_dir():
    """A fresh directory that every user may enter (not write to)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="gs"))
    os.chmod(d, 0o755)
    return d


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def probe_env(sim, endpoint):
    return gstest.hook_env(sim, endpoint, GPUSHARE_IDLE_RELEASE_MS=0)


UNGATED_STEPS = ["init", "launch", "L", "1000", "sync", "gate", "end"]


def assert_ran_ungated(p):
    fields, _ = p.expect("gate")
    assert fields[1] == "2", "not ungated"
    assert p.wait() == 0


# ---- 1: descriptor exhaustion ----------------------------------------------


def test_1_broker_raises_its_open_file_limit_and_serves_more_connections(short_tmp, sim):
    """With a soft limit of 256, libzmq used to abort the broker (EMFILE in
    its accept) before 250 connections (fewer than one user may hold)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip("the hard open-file limit (%d) leaves no room above 256" % hard)
    cmd = ["/bin/sh", "-c", 'ulimit -Sn 256 && exec "$0" "$@"', gstest.BROKER, "-v"]
    b = gstest.Broker(short_tmp, sim, cmd=cmd).start()
    socks = []
    try:
        soft, hard = nofile(b.proc.pid)
        assert soft == hard and soft >= 2048, (soft, hard)
        for _ in range(250):
            s = dealer(b.endpoint)
            s.connect(b.endpoint)
            socks.append(s)
        for s in socks:
            s.send(b"{}")
        for s in socks:
            assert json.loads(s.recv())["code"] == "no_version"
        assert b.proc.poll() is None
        assert b.status()["connections"]["open"] >= 250
    finally:
        for s in socks:
            s.close()
        b.stop()


@pytest.mark.broker(config="max_connections_per_uid = 3")
def test_1_connections_over_the_per_uid_limit_are_refused_then_closed(broker):
    path = broker.endpoint[len("ipc://"):]
    clients = [Client(broker.endpoint, "cli") for _ in range(3)]
    s = dealer(broker.endpoint, reconnect=False)
    mon = s.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(broker.endpoint)
        s.send(hello())
        r = json.loads(s.recv())
        assert r["type"] == "error" and r["code"] == "too_many_connections", r
        assert "max_connections_per_uid (3)" in r["message"], r
        wait_disconnected(mon)  # and then the broker closed it
        s.disable_monitor()
        s.close()
        # One that never says a word is closed too: EOF after the broker's
        # greeting.
        raw.settimeout(TIMEOUT_MS / 1000)
        raw.connect(path)
        while raw.recv(4096):
            pass
        raw.close()
        assert "more than max_connections_per_uid (3)" in broker.log()
        # Once one of the three goes, there is room again (the broker counts
        # a connection gone when libzmq tells it, a moment after the peer
        # sees it go: asked on a connection that stays).
        def open_connections():
            return clients[-1].call({"type": "status"})["status"]["connections"]["open"]
        gstest.wait_until(lambda: open_connections() == 3, what="the refused ones closed")
        clients.pop(0).close()
        gstest.wait_until(lambda: open_connections() == 2, what="one of the three gone")
        clients.append(Client(broker.endpoint, "cli"))
    finally:
        mon.close()
        raw.close()
        for c in clients:
            c.close()
    assert broker.status()["connections"]["refused"] >= 2


# ---- 2: someone else's socket where the user's broker should be ------------


def test_2_cli_refuses_a_socket_that_others_could_have_put_there(short_tmp, fake_brokers):
    d = open_dir(short_tmp)
    fb = fake_brokers("ipc://%s/b.sock" % d)  # welcomes, and would never grant
    r = cli("--broker", "ipc://%s/b.sock" % d, "status")
    assert r.returncode == 1
    assert "refusing the broker socket %s/b.sock" % d in r.stderr, r.stderr
    assert "directory %s is writable by others (mode 0777)" % d in r.stderr, r.stderr
    assert not fb.messages("hello")


def test_2_per_user_socket_in_a_directory_not_private_is_passed_over(short_tmp, fake_brokers,
                                                                     sim):
    xdg = short_tmp / "xdg"
    xdg.mkdir(mode=0o700)
    d = open_dir(xdg, "gpushare")
    fb = fake_brokers("ipc://%s/broker.sock" % d)
    env = dict(sim, XDG_RUNTIME_DIR=str(xdg))
    env.pop("GPUSHARE_BROKER", None)
    r = cli("status", env=env)
    assert "warning: ignoring %s/broker.sock" % d in r.stderr, r.stderr
    assert "writable by others" in r.stderr
    assert not fb.messages("hello")


def test_2_hook_runs_ungated_rather_than_trust_such_a_socket(short_tmp, fake_brokers, sim,
                                                             tmp_path):
    """The audit's mallory served a ROUTER that welcomes and never grants:
    alice's program blocked for good."""
    gstest.ensure_probe()
    endpoint = "ipc://%s/b.sock" % open_dir(short_tmp)
    fb = fake_brokers(endpoint)
    p = gstest.Probe(tmp_path, probe_env(sim, endpoint), UNGATED_STEPS)
    try:
        assert_ran_ungated(p)
        assert "refusing the broker socket" in p.stderr(), p.stderr()
        assert not fb.messages("hello")
    finally:
        p.kill()


def test_2_broker_refuses_a_per_user_directory_that_is_not_private(short_tmp, sim):
    xdg = short_tmp / "xdg"
    (xdg / "gpushare").mkdir(parents=True, mode=0o700)
    os.chmod(xdg, 0o700)
    os.chmod(xdg / "gpushare", 0o755)
    env = dict(sim, XDG_RUNTIME_DIR=str(xdg))
    env.pop("GPUSHARE_BROKER", None)
    r = subprocess.run([gstest.BROKER], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "must be yours with mode 0700" in r.stderr, r.stderr
    assert not (xdg / "gpushare" / "broker.sock").exists()


def test_2_broker_leaves_another_users_stale_socket_alone(short_tmp, sim):
    root_only()
    sock = short_tmp / "broker.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock))
    s.close()
    os.chown(sock, NOBODY, NOBODY)
    r = subprocess.run([gstest.BROKER, "-e", str(sock)], env=sim, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "belongs to uid %d" % NOBODY in r.stderr, r.stderr
    assert sock.exists()


def test_2_clients_refuse_a_broker_run_by_another_user(short_tmp, tmp_path, sim):
    """A socket in a trusted place, with another user's process listening
    on it (the socket moved there): its credentials give it away."""
    root_only()
    top = shared_dir()
    home = top / "nobody"
    home.mkdir()
    script = home / "fakebroker.py"
    shutil.copy(gstest.FAKEBROKER, script)
    os.chmod(home, 0o755)
    os.chown(home, NOBODY, NOBODY)
    fake = subprocess.Popen(as_nobody([gstest.PYTHON, str(script), "ipc://%s/b.sock" % home]),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout.readline().strip() == "ready"
        sock = short_tmp / "b.sock"
        os.rename(home / "b.sock", sock)
        os.chown(sock, 0, 0)
        r = cli("--broker", str(sock), "status")
        assert r.returncode == 1
        assert "refusing the broker at %s: it runs as uid %d" % (sock, NOBODY) in r.stderr, \
            r.stderr
        p = gstest.Probe(tmp_path, probe_env(sim, "ipc://%s" % sock), UNGATED_STEPS)
        try:
            assert_ran_ungated(p)
            assert "it runs as uid %d" % NOBODY in p.stderr(), p.stderr()
        finally:
            p.kill()
    finally:
        fake.send_signal(signal.SIGTERM)
        fake.wait(30)
        shutil.rmtree(top, ignore_errors=True)


# ---- 3: session ids ----------------------------------------------------------


def test_3_long_or_odd_session_ids_are_refused_where_they_arrive(broker):
    """A 129-byte id used to be looked up whole and stored cut to 128
    bytes: join "A"*128+"X" entered the "A"*128 session."""
    gpu = broker.status()["gpus"][0]["uuid"]
    alice = Client(broker.endpoint, "hook")
    mallory = Client(broker.endpoint, "hook")
    launcher = Client(broker.endpoint)
    try:
        a = "A" * 128
        r = alice.call({"type": "join", "pid": os.getpid(), "session": a, "devices": [gpu]})
        assert r["type"] == "ok" and r["session"] == a, r
        for bad in ["A" * 128 + "X", "A" * 4000, "s/../x", "s x", "caf\u00e9"]:
            r = mallory.call({"type": "join", "pid": os.getpid(), "session": bad,
                              "devices": [gpu]})
            assert r["type"] == "error" and r["code"] == "bad_value", (bad[:20], r)
        r = launcher.call({"type": "register", "kernel_id": "k" * 129, "user": "u", "pid": 1})
        assert r["code"] == "bad_value" and "128-byte limit" in r["message"], r
        r = launcher.call({"type": "unregister", "session": "A" * 128 + "X"})
        assert r["code"] == "bad_value", r
    finally:
        for c in (alice, mallory, launcher):
            c.close()


def test_3_routing_ids_too_long_to_key_a_client_are_refused(broker):
    s = dealer(broker.endpoint)
    s.setsockopt(zmq.ROUTING_ID, b"r" * 40)
    s.connect(broker.endpoint)
    try:
        s.send(hello(seq=5))
        r = json.loads(s.recv())
        assert r["type"] == "error" and r["code"] == "bad_value" and r["seq"] == 5, r
        assert "routing id of 40 bytes" in r["message"]
    finally:
        s.close()


# ---- 4: tcp:// ----------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    [gstest.BROKER, "-e", "tcp://127.0.0.1:5555"],
    [gstest.CLI, "--broker", "tcp://127.0.0.1:5555", "status"],
    [gstest.LAUNCH, "--broker", "tcp://127.0.0.1:5555", "--", "true"],
])
def test_4_tcp_endpoints_are_refused_and_say_why(argv, sim):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=sim)
    assert r.returncode != 0
    assert "tcp:// is not supported" in r.stderr and "credentials" in r.stderr, r.stderr


def test_4_tcp_endpoint_in_the_configuration_file_stops_the_broker(short_tmp, sim):
    conf = short_tmp / "broker.conf"
    conf.write_text("endpoint = tcp://127.0.0.1:5555\n")
    r = subprocess.run([gstest.BROKER, "-c", str(conf)], capture_output=True, text=True,
                       timeout=60, env=sim)
    assert r.returncode == 1 and "tcp:// is not supported" in r.stderr, r.stderr


# ---- 5: frames over 1 MiB -------------------------------------------------------


def test_5_oversized_frame_drops_the_connection_before_it_is_read(broker):
    """A 1.5 GB frame used to be buffered whole before the 1 MiB check."""
    before = vm_hwm_kib(broker.proc.pid)
    s = dealer(broker.endpoint, reconnect=False)
    mon = s.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        s.connect(broker.endpoint)
        s.send(b"x" * (64 << 20))
        wait_disconnected(mon)
    finally:
        s.disable_monitor()
        mon.close()
        s.close()
    assert vm_hwm_kib(broker.proc.pid) - before < 32 << 10, "the frame was buffered"
    assert broker.status()["gpus"]  # and the broker still serves


# ---- 6: who a session's user is ---------------------------------------------


def test_6_status_shows_the_owner_from_credentials_and_a_claim_as_claimed(broker):
    me = pwd.getpwuid(os.getuid()).pw_name
    launcher = Client(broker.endpoint)
    try:
        for kid, user in (("k-claim", "alice"), ("k-own", me)):
            r = launcher.call({"type": "register", "kernel_id": kid, "user": user,
                               "notebook": "alice/secret.ipynb", "pid": os.getpid()})
            assert r["type"] == "registered", r
        ss = broker.sessions()
        assert (ss["k-claim"]["user"], ss["k-claim"]["uid"]) == (me, os.getuid())
        assert ss["k-claim"]["claimed_user"] == "alice"
        assert ss["k-own"]["user"] == me and "claimed_user" not in ss["k-own"]
        text = broker.cli("status").stdout
        assert 'registered as user "alice" (a claim; the owner is %s)' % me in text, text
        (ev,) = [e for e in broker.synced_events("register") if e["session"] == "k-claim"]
        assert ev["user"] == me and ev["claimed_user"] == "alice", ev
    finally:
        launcher.close()


def test_6_a_session_registered_as_someone_else_is_shown_under_its_real_owner(short_tmp, sim):
    """The audit's mallory registered as user alice with notebook
    alice/secret.ipynb; now status names mallory (here: nobody)."""
    root_only()
    d = shared_dir()
    b = gstest.Broker(d, sim).start()
    try:
        os.chmod(d / "broker.sock", 0o777)
        code = ("import json, os, zmq\n"
                "s = zmq.Context().socket(zmq.DEALER); s.connect(%r)\n"
                "s.send(json.dumps({'v': 1, 'type': 'register', 'seq': 1, 'kernel_id': 'k-m',"
                " 'user': 'alice', 'notebook': 'alice/secret.ipynb', 'pid': os.getpid()})"
                ".encode())\n"
                "print(json.loads(s.recv())['type'], flush=True)\n"
                "input()\n" % b.endpoint)
        # It stays until status is read: a session whose registrar is gone
        # ends (liveness).
        p = subprocess.Popen(as_nobody([gstest.PYTHON, "-c", code]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd="/")
        try:
            assert p.stdout.readline().strip() == "registered"
            s = b.sessions()["k-m@%d" % NOBODY]  # its id: name@uid (not the broker's user)
            assert (s["user"], s["uid"], s["claimed_user"]) == ("nobody", NOBODY, "alice"), s
        finally:
            p.stdin.close()
            p.wait(60)
    finally:
        b.stop()
        shutil.rmtree(d, ignore_errors=True)


# ---- 11: clear messages ---------------------------------------------------------


def test_11_stale_socket_is_named_not_waited_for(short_tmp, sim, tmp_path):
    b = gstest.Broker(short_tmp, sim).start()
    b.stop(sig=signal.SIGKILL)
    path = b.endpoint[len("ipc://"):]
    r = cli("--broker", b.endpoint, "status")
    assert r.returncode == 1
    assert "broker not running (stale socket %s" % path in r.stderr, r.stderr
    gstest.ensure_probe()
    p = gstest.Probe(tmp_path, probe_env(sim, b.endpoint), UNGATED_STEPS)
    try:
        assert_ran_ungated(p)
        assert "broker not running (stale socket %s" % path in p.stderr(), p.stderr()
    finally:
        p.kill()


def test_11_user_outside_the_socket_group_reads_permission_denied(sim):
    root_only()
    d = shared_dir()
    b = gstest.Broker(d, sim).start()
    try:
        sock = d / "broker.sock"
        os.chmod(sock, 0o660)  # root's group only, as with socket_group
        r = cli("--broker", b.endpoint, "status", user="nobody")
        assert r.returncode == 1
        assert "permission denied: cannot connect to %s (not in group root?)" % sock in \
            r.stderr, r.stderr
    finally:
        b.stop()
        shutil.rmtree(d, ignore_errors=True)
