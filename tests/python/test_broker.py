"""gpushare-broker as a process: GPU inventory (simulated or none), the
status it reports, malformed input, signals, its socket's life."""
import json
import os
import pwd
import signal
import subprocess

import pytest
import zmq

import gstest
from gstest import Client


def test_reports_simulated_gpu_plainly(broker):
    st = broker.status()
    assert st["simulated"] is True
    assert st["driver"] == "simulated"
    assert len(st["gpus"]) == 1
    gpu = st["gpus"][0]
    assert gpu["simulated"] is True
    assert gpu["memory_total"] == 1 << 30
    assert gpu["uuid"].startswith("GPU-")
    for key in ("holders", "waiting", "sessions", "memory_used", "name"):
        assert key in gpu
    human = broker.cli("status").stdout
    assert "SIMULATED GPU" in human
    assert "SIMULATED GPU" in broker.log()


def test_without_a_driver_runs_with_no_gpus(tmp_path):
    env = dict(os.environ, LD_LIBRARY_PATH="", GPUSHARE_LIBCUDA=str(tmp_path / "nope.so"))
    b = gstest.Broker(tmp_path, env).start()
    try:
        st = b.status()
        assert st["gpus"] == []
        assert st["driver"] == "none"
        assert st["simulated"] is False
        assert "no NVIDIA driver" in st["problem"]
    finally:
        assert b.stop() == 0


def _raw_call(endpoint, frames, timeout_ms=3000):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, timeout_ms)
    s.connect(endpoint)
    try:
        s.send_multipart(frames)
        return json.loads(s.recv())
    finally:
        s.close()


# A frame over 1 MiB is not answered: the connection is dropped before the
# frame is read (test_security.py).
@pytest.mark.parametrize("frames, code", [
    ([b"not json"], "not_json"),
    ([b"[1,2]"], "not_object"),
    ([b'{"type":"status"}'], "no_version"),
    ([b'{"v":2,"type":"status"}'], "bad_version"),
    ([b'{"v":1,"type":"teleport"}'], "unknown_type"),
    ([b'{"v":1,"type":"hello","role":"hook"}'], "missing_field"),
    ([b'{"v":1,"type":"hello","role":"hook","pid":"1"}'], "wrong_type"),
    ([b'{"v":1,"type":"hello","role":"wizard","pid":1}'], "bad_value"),
    ([b""], "empty"),
    ([b'{"v":1,"type":"status"}', b"extra"], None),
    ([b'{"v":1,"type":"grant","device":"GPU-x","grant_id":1,"quantum_us":0}'], "wrong_direction"),
])
def test_malformed_messages_get_typed_error_replies(broker, frames, code):
    reply = _raw_call(broker.endpoint, frames)
    assert reply["type"] == "error"
    if code:
        assert reply["code"] == code, reply
    assert reply["message"]
    # The broker survived and still serves.
    assert broker.status()["gpus"]


def test_error_reply_echoes_seq(broker):
    reply = _raw_call(broker.endpoint, [b'{"v":1,"type":"hello","seq":42,"role":"x","pid":1}'])
    assert reply["type"] == "error" and reply["seq"] == 42


def test_hello_gets_welcome(broker):
    reply = _raw_call(broker.endpoint,
                      [b'{"v":1,"type":"hello","seq":7,"role":"hook","pid":%d}' % os.getpid()])
    assert reply["type"] == "welcome"
    assert reply["seq"] == 7
    assert reply["simulated"] is True
    assert reply["policy"] in ("exclusive", "burst", "adaptive")


def test_second_broker_on_same_socket_refuses(broker, tmp_path):
    r = subprocess.run([gstest.BROKER, "--endpoint", broker.endpoint], env=broker.env,
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    assert "already listening" in r.stderr
    assert broker.status()  # the first one is unharmed


def test_stale_socket_of_a_killed_broker_is_replaced(tmp_path, sim):
    b = gstest.Broker(tmp_path, sim).start()
    b.stop(sig=signal.SIGKILL)
    assert os.path.exists(str(tmp_path / "broker.sock"))
    b2 = gstest.Broker(tmp_path, sim).start()
    try:
        assert b2.status()["simulated"]
    finally:
        b2.stop()


def test_sigterm_exits_cleanly_and_removes_socket(tmp_path, sim):
    b = gstest.Broker(tmp_path, sim).start()
    assert b.stop() == 0
    assert not os.path.exists(str(tmp_path / "broker.sock"))


def test_sigusr2_turns_scheduler_off_and_sigusr1_on(broker):
    assert broker.status()["scheduler"] == "on"
    broker.proc.send_signal(signal.SIGUSR2)
    assert broker.status()["scheduler"] == "off"
    broker.proc.send_signal(signal.SIGUSR1)
    assert broker.status()["scheduler"] == "on"


@pytest.mark.parametrize("args, text", [
    (["--bogus"], "unrecognized option"),
    (["--endpoint", "udp://x"], "only ipc:// is supported"),
    (["--endpoint", "tcp://127.0.0.1:5555"], "tcp:// is not supported"),
    (["--endpoint", "/tmp/" + "x" * 200], "too long"),
    (["--socket-group", "no-such-group-gs"], "no group named"),
    (["stray"], "unexpected argument"),
])
def test_bad_arguments_exit_2_with_a_clear_message(args, text):
    r = subprocess.run([gstest.BROKER] + args, capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert text in r.stderr


def test_help_and_version():
    r = subprocess.run([gstest.BROKER, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "Usage: gpushare-broker" in r.stdout
    r = subprocess.run([gstest.BROKER, "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("gpushare-broker ")


def test_sessions_cells_and_grants_appear_in_status(broker):
    gpu = broker.status()["gpus"][0]["uuid"]
    launcher = Client(broker.endpoint, "launcher")
    hook = Client(broker.endpoint, "hook")
    try:
        r = launcher.call({"type": "register", "kernel_id": "k-1", "user": "ada",
                           "notebook": "train.ipynb", "pid": os.getpid()})
        assert r == dict(r, type="registered", session="k-1")
        launcher.send({"type": "cell", "session": "k-1", "state": "busy", "msg_id": "m1"})
        assert hook.call({"type": "join", "pid": 4242, "session": "k-1",
                          "devices": [gpu]})["session"] == "k-1"
        grant = hook.call({"type": "acquire", "device": gpu})
        assert grant["type"] == "grant" and grant["grant_id"] >= 1
        hook.send({"type": "memory", "device": gpu, "used_bytes": 123456})
        st = broker.status()
        g = st["gpus"][0]
        assert g["holders"] == ["k-1"]
        assert g["memory_used"] == 123456
        (s,) = g["sessions"]
        # user: the owner's account, from the socket; "ada" is only claimed
        assert (s["id"], s["user"], s["claimed_user"], s["notebook"], s["kernel_id"]) == \
            ("k-1", pwd.getpwuid(os.getuid()).pw_name, "ada", "train.ipynb", "k-1")
        assert s["uid"] == os.getuid()
        assert s["pids"] == [4242] and s["cell"] == "busy" and s["state"] == "running"
        assert s["grants"] == 1 and s["resident_bytes"] == 123456
        hook.send({"type": "release", "device": gpu, "grant_id": grant["grant_id"],
                   "reason": "idle"})
        launcher.send({"type": "cell", "session": "k-1", "state": "idle", "msg_id": "m1"})
        s = broker.status()["gpus"][0]["sessions"][0]
        assert (s["state"], s["cell"]) == ("idle", "idle")
        assert launcher.call({"type": "unregister", "session": "k-1"})["type"] == "ok"
        r = launcher.call({"type": "unregister", "session": "k-1"})
        assert (r["type"], r["code"]) == ("error", "unknown_session")
    finally:
        launcher.close()
        hook.close()


def test_acquire_before_join_and_unknown_device_are_refused(broker):
    hook = Client(broker.endpoint, "hook")
    try:
        r = hook.call({"type": "acquire", "device": "GPU-nope"})
        assert (r["type"], r["code"]) == ("error", "not_joined")
        hook.call({"type": "join", "pid": 1, "devices": []})
        r = hook.call({"type": "acquire", "device": "GPU-nope"})
        assert (r["type"], r["code"]) == ("error", "unknown_device")
        assert "GPU-nope" in r["message"]
    finally:
        hook.close()


def test_a_late_unregister_from_an_old_launcher_keeps_the_new_registration(broker):
    """A restarted kernel's new watcher registers again; the old watcher's
    unregister, arriving late from another process, must not drop it."""
    new = Client(broker.endpoint, "launcher")
    code = ("import json, sys, zmq\n"
            "s = zmq.Context().socket(zmq.DEALER); s.setsockopt(zmq.RCVTIMEO, 3000)\n"
            "s.connect(sys.argv[1])\n"
            "def call(m):\n"
            "    s.send(json.dumps(dict(m, v=1, seq=1)).encode()); return json.loads(s.recv())\n"
            "call({'type': 'hello', 'role': 'launcher', 'pid': 1})\n"
            "call({'type': 'register', 'kernel_id': 'k-r', 'user': 'ada', 'pid': 1})\n"
            "print('registered', flush=True)\n"
            "sys.stdin.readline()\n"
            "print(json.dumps(call({'type': 'unregister', 'session': 'k-r'})))\n")
    old = subprocess.Popen([gstest.PYTHON, "-c", code, broker.endpoint], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert old.stdout.readline().strip() == "registered"
        new.call({"type": "register", "kernel_id": "k-r", "user": "ada", "pid": os.getpid()})
        out, _ = old.communicate("go\n", timeout=10)
        r = json.loads(out)
        assert r["type"] == "ok" and "ignored" in r["info"]
        assert [s["id"] for s in broker.status()["gpus"][0]["sessions"]] == ["k-r"]
        assert new.call({"type": "unregister", "session": "k-r"})["type"] == "ok"
        assert broker.status()["gpus"][0]["sessions"] == []
    finally:
        old.kill()
        new.close()


def test_joins_get_epochs_and_a_forgotten_one_is_named(broker):
    """Fencing (protocol.md): a join's answer and the client's grants carry
    its epoch; a heartbeat naming an epoch the broker no longer has is
    answered unknown_client; joining again starts the client over (its old
    grant goes) under a new epoch."""
    gpu = broker.status()["gpus"][0]["uuid"]
    h = Client(broker.endpoint, "hook")
    try:
        e1 = h.call({"type": "join", "pid": os.getpid(), "devices": [gpu]})["epoch"]
        g = h.call({"type": "acquire", "device": gpu})
        assert g["type"] == "grant" and g["epoch"] == e1
        r = h.call({"type": "heartbeat", "epoch": e1 + 100})
        assert r["type"] == "error" and r["code"] == "unknown_client", r
        assert r["request_type"] == "heartbeat"
        # The current epoch (or none) is not answered: the next reply on
        # this socket is the status request's.
        h.send({"type": "heartbeat", "epoch": e1})
        h.send({"type": "heartbeat"})
        h.send({"type": "status"})
        assert h.recv()["type"] == "status_reply"
        e2 = h.call({"type": "join", "pid": os.getpid(), "devices": [gpu]})["epoch"]
        assert e2 > e1
        gone = [e for e in broker.synced_events("client_gone") if e["pid"] == os.getpid()]
        assert [e["why"] for e in gone] == ["it joined again"]
        assert not broker.status()["gpus"][0]["holders"]  # the old grant went with it
        r = h.call({"type": "heartbeat", "epoch": e1})
        assert r["code"] == "unknown_client" and "joined again since" in r["message"]
        g2 = h.call({"type": "acquire", "device": gpu})
        assert g2["type"] == "grant" and g2["epoch"] == e2 and g2["grant_id"] != g["grant_id"]
    finally:
        h.close()
