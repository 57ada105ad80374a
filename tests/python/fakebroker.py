"""A broker the test drives, and the hook_probe program that talks to it.

FakeBroker is a pyzmq ROUTER bound to an ipc endpoint.  A thread of its own
answers hello (welcome) and join (ok) like the real broker, grants acquires
only when told to (or at once with auto_grant), sends what the test asks
(grant, revoke, anything), and records every message with its arrival time
(CLOCK_MONOTONIC nanoseconds, the clock of the simulated driver's execution
log), and connections opening and closing (direction "event", types
"_accepted" and "_disconnected").  welcome=False makes it a broker that never answers.  Tests wait for
messages with a timeout instead of sleeping.

Probe runs tests/hook/hook_probe (a CUDA program scripted by its arguments)
with the hook preloaded on the simulated GPU, and lets the test wait for the
lines it prints and tell it when to go on.
"""
import json
import os
import queue
import subprocess
import threading
import time

import zmq
import zmq.utils.monitor

import gstest

PROBE = os.path.join(gstest.BUILDDIR, "tests", "hook", "hook_probe")


class FakeBroker:
    def __init__(self, endpoint, welcome=True, auto_grant=False, heartbeat_ms=1000,
                 quantum_us=0):
        self.endpoint = endpoint
        self.welcome = welcome
        self.auto_grant = auto_grant
        self.heartbeat_ms = heartbeat_ms
        self.quantum_us = quantum_us
        self.records = []  # dicts: msg, ident, t (ns), dir ("in" or "out")
        self.cond = threading.Condition()
        self.outbox = queue.Queue()
        self.next_grant_id = 1
        self.ack_info = None  # when set, acquire is answered with ok + info
        self._stop = threading.Event()
        self._thread = None
        self.ctx = zmq.Context.instance()

    # ---- life ---------------------------------------------------------------

    def start(self):
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(self.endpoint)
        self.mon = self.sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Closes the socket: to the hook, the broker is gone."""
        if self._thread:
            self._stop.set()
            self._thread.join(5)
            self._thread = None
            self.sock.disable_monitor()
            self.mon.close(0)
            self.sock.close(0)
            path = self.endpoint[len("ipc://"):]
            if os.path.exists(path):
                os.unlink(path)

    def _run(self):
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.mon, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll(10))
            if self.mon in ready:
                ev = zmq.utils.monitor.recv_monitor_message(self.mon)
                name = {zmq.EVENT_ACCEPTED: "_accepted",
                        zmq.EVENT_DISCONNECTED: "_disconnected"}.get(ev["event"], "_other")
                self._record({"type": name}, b"", "event")
            if self.sock in ready:
                frames = self.sock.recv_multipart()
                ident, data = frames[0], frames[-1]
                msg = json.loads(data)
                self._record(msg, ident, "in")
                self._answer(ident, msg)
            while True:
                try:
                    ident, msg = self.outbox.get_nowait()
                except queue.Empty:
                    break
                self._send_now(ident, msg)

    def _record(self, msg, ident, direction):
        with self.cond:
            self.records.append({"msg": msg, "ident": ident, "t": time.monotonic_ns(),
                                 "dir": direction})
            self.cond.notify_all()

    def _send_now(self, ident, msg):
        self._record(msg, ident, "out")  # timed before it leaves: nothing can react earlier
        self.sock.send_multipart([ident, json.dumps(msg).encode()])

    def _answer(self, ident, msg):
        t = msg.get("type")
        reply = None
        if t == "hello" and self.welcome:
            reply = {"v": 1, "type": "welcome", "client_id": "c-%d" % len(self.records),
                     "broker_version": "fake", "policy": "exclusive", "scheduler": "on",
                     "heartbeat_ms": self.heartbeat_ms, "simulated": True}
        elif t == "join" and self.welcome:
            reply = {"v": 1, "type": "ok", "session": msg.get("session") or "s-fake"}
        elif t == "acquire" and self.auto_grant:
            reply = self._grant_msg(msg["device"], None, self.quantum_us)
        elif t == "acquire" and self.ack_info:
            reply = {"v": 1, "type": "ok", "info": self.ack_info}
        if reply is not None:
            if "seq" in msg:
                reply["seq"] = msg["seq"]
            self._send_now(ident, reply)

    def _grant_msg(self, device, grant_id, quantum_us):
        if grant_id is None:
            grant_id = self.next_grant_id
            self.next_grant_id += 1
        return {"v": 1, "type": "grant", "device": device, "grant_id": grant_id,
                "quantum_us": quantum_us}

    # ---- what the test sees -------------------------------------------------

    def count(self):
        with self.cond:
            return len(self.records)

    def messages(self, type=None, direction="in", after=0):
        with self.cond:
            return [r for r in self.records[after:]
                    if r["dir"] == direction and (type is None or r["msg"].get("type") == type)]

    def wait_for(self, type, timeout=5.0, after=0, pred=None, direction="in"):
        """The first record of `type` from index `after` on (and matching
        pred); AssertionError after timeout seconds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for r in self.records[after:]:
                    if r["dir"] == direction and r["msg"].get("type") == type and \
                            (pred is None or pred(r["msg"])):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no %s from the hook within %.1f s; got %s" % (
                        type, timeout, [r["msg"].get("type") for r in self.records]))
                self.cond.wait(left)

    # ---- what the test does -------------------------------------------------

    def send(self, ident, msg):
        self.outbox.put((ident, msg))

    def grant(self, acquire=None, grant_id=None, quantum_us=0, timeout=5.0):
        """Grants the device of `acquire` (a record; default: the latest
        acquire) to its sender.  Returns the grant's record once sent."""
        if acquire is None:
            acquire = self.wait_for("acquire", timeout)
            acquire = self.messages("acquire")[-1]
        n = self.count()
        msg = self._grant_msg(acquire["msg"]["device"], grant_id, quantum_us)
        self.send(acquire["ident"], msg)
        return self.wait_for("grant", timeout, after=n, direction="out")

    def revoke(self, grant, reason="quantum", timeout=5.0):
        """Revokes a grant (a record of a grant sent).  Returns the revoke's
        record once sent."""
        n = self.count()
        g = grant["msg"]
        self.send(grant["ident"], {"v": 1, "type": "revoke", "device": g["device"],
                                   "grant_id": g["grant_id"], "reason": reason})
        return self.wait_for("revoke", timeout, after=n, direction="out")


class Probe:
    """hook_probe running `steps` with the hook preloaded."""

    def __init__(self, tmp_path, env, steps, name="probe"):
        self.stderr_path = tmp_path / (name + ".stderr")
        self.lines = []
        self.cond = threading.Condition()
        self.pos = 0
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen([PROBE] + list(steps), env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # EOF
            self.cond.notify_all()

    def expect(self, prefix, timeout=5.0):
        """Waits for the next line starting with prefix (lines before it are
        skipped); returns (fields, t_ns).  Fails on error lines."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                while self.pos < len(self.lines):
                    line = self.lines[self.pos]
                    self.pos += 1
                    if line is None:
                        raise AssertionError("probe ended before '%s'; stderr:\n%s" % (
                            prefix, self.stderr()))
                    if line.startswith("error"):
                        raise AssertionError("probe: %s\n%s" % (line, self.stderr()))
                    if line.startswith(prefix):
                        fields = line.split()
                        t = int(fields[-1][2:]) if fields[-1].startswith("t=") else 0
                        return fields[:-1], t
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no '%s' from the probe within %.1f s; output %s; "
                                         "stderr:\n%s" % (prefix, timeout, self.lines,
                                                          self.stderr()))
                self.cond.wait(left)

    def printed(self, prefix):
        with self.cond:
            return any(line is not None and line.startswith(prefix) for line in self.lines)

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def wait(self, timeout=10.0):
        return self.proc.wait(timeout)

    def stderr(self):
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def ensure_probe():
    if not os.path.exists(PROBE):
        subprocess.run(["make", "-C", os.path.dirname(PROBE), "hook_probe"], check=True,
                       stdout=subprocess.DEVNULL)
    return PROBE


def sim_log(env):
    """The simulated driver's execution log: one dict per executed op."""
    path = env["GPUSHARE_SIM_LOG"]
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def kernels(env, name=None):
    return [r for r in sim_log(env) if r.get("op") == "kernel" and
            (name is None or r.get("name") == name)]


def hook_env(sim, endpoint, **extra):
    """The simulated-GPU environment with the hook preloaded and pointed at
    endpoint.  Idle release is off unless a test sets it."""
    env = dict(sim)
    env.update({"LD_PRELOAD": gstest.HOOK, "GPUSHARE_BROKER": endpoint,
                "GPUSHARE_IDLE_RELEASE_MS": "0"})
    env.pop("GPUSHARE_DISABLE", None)
    env.pop("GPUSHARE_LOG", None)
    env.pop("GPUSHARE_SESSION", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def main(argv):
    """python3 fakebroker.py ENDPOINT [--auto-grant]: a broker in a process of
    its own (tests stop it with SIGSTOP to see a broker that hangs).  Prints
    "ready" once bound."""
    import signal
    import sys
    b = FakeBroker(argv[1], auto_grant="--auto-grant" in argv).start()
    print("ready", flush=True)
    signal.sigwait([signal.SIGTERM, signal.SIGINT])
    b.stop()
    sys.exit(0)


if __name__ == "__main__":
    import sys
    main(sys.argv)
