"""A stand-in broker the test drives (for the hook's and the launcher's
tests), and, run as a program, the same in a process of its own.

FakeBroker is a pyzmq ROUTER bound to an ipc endpoint.  A thread of its own
answers hello (welcome), join (ok), register (registered, the session is
the kernel id) and unregister (ok) like the real broker, grants acquires
only when told to (or at once with auto_grant), answers make_room through
on_make_room, sends what the test asks (grant, revoke, anything), and
records every message with its arrival time (CLOCK_MONOTONIC nanoseconds,
the clock of the simulated driver's execution log and of hook_probe's
lines), and connections opening and closing (direction "event", types
"_accepted" and "_disconnected").  welcome=False makes it a broker that
never answers.  Tests wait for records (wait_for) instead of sleeping.
"""
import json
import os
import queue
import threading
import time

import zmq
import zmq.utils.monitor


class FakeBroker:
    def __init__(self, endpoint, welcome=True, auto_grant=False, heartbeat_ms=1000,
                 quantum_us=0, on_make_room=None, epochs=False):
        self.endpoint = endpoint
        # make_room -> on_make_room(msg): the room reply's fields (ok, ...),
        # or None for no reply
        self.on_make_room = on_make_room
        self.welcome = welcome
        self.auto_grant = auto_grant
        self.heartbeat_ms = heartbeat_ms
        self.quantum_us = quantum_us
        self.records = []  # dicts: msg, ident, t (ns), dir ("in" or "out")
        self.cond = threading.Condition()
        self.outbox = queue.Queue()
        self.next_grant_id = 1
        # epochs=True: joins are answered with an epoch (1, 2, ...) and
        # grants carry their client's latest one, as the real broker does
        self.epochs = epochs
        self.epoch_of = {}  # ident -> epoch of its latest join
        self.ack_info = None  # when set, acquire is answered with ok + info
        self.ack_extra = {}  # and these fields (holder, left_ms)
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
            while self.mon in ready:  # all of them: they are older than what sock has now
                try:
                    ev = zmq.utils.monitor.recv_monitor_message(self.mon, zmq.NOBLOCK)
                except zmq.Again:
                    break
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
            if self.epochs:
                self.epoch_of[ident] = reply["epoch"] = sum(
                    1 for r in self.records if r["msg"].get("type") == "join")
        elif t == "acquire" and self.auto_grant:
            reply = self._grant_msg(msg["device"], None, self.quantum_us, ident)
        elif t == "acquire" and self.ack_info:
            reply = dict({"v": 1, "type": "ok", "info": self.ack_info}, **self.ack_extra)
        elif t == "register" and self.welcome:
            reply = {"v": 1, "type": "registered", "session": msg["kernel_id"]}
        elif t == "unregister" and self.welcome:
            reply = {"v": 1, "type": "ok"}
        elif t == "make_room" and self.on_make_room:
            fields = self.on_make_room(msg)
            if fields is not None:
                reply = dict({"v": 1, "type": "room", "device": msg["device"]}, **fields)
        if reply is not None:
            if "seq" in msg:
                reply["seq"] = msg["seq"]
            self._send_now(ident, reply)

    def _grant_msg(self, device, grant_id, quantum_us, ident, epoch=None):
        if grant_id is None:
            grant_id = self.next_grant_id
            self.next_grant_id += 1
        msg = {"v": 1, "type": "grant", "device": device, "grant_id": grant_id,
               "quantum_us": quantum_us}
        if epoch is None and self.epochs:
            epoch = self.epoch_of.get(ident)
        if epoch is not None:
            msg["epoch"] = epoch
        return msg

    # ---- what the test sees -------------------------------------------------

    def count(self):
        with self.cond:
            return len(self.records)

    def messages(self, type=None, direction="in", after=0):
        with self.cond:
            return [r for r in self.records[after:]
                    if r["dir"] == direction and (type is None or r["msg"].get("type") == type)]

    def wait_for(self, type, timeout=30.0, after=0, pred=None, direction="in", since=None):
        """The first record of `type` from index `after` on, that came after
        `since` (ns) and matches pred(msg); AssertionError after timeout
        seconds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for r in self.records[after:]:
                    if r["dir"] == direction and r["msg"].get("type") == type and \
                            (since is None or r["t"] > since) and (pred is None or pred(r["msg"])):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no %s within %.0f s; got %s" % (
                        type, timeout, [r["msg"].get("type") for r in self.records]))
                self.cond.wait(left)

    def heartbeats_between(self, t0, t1):
        """The heartbeats that arrived between t0 and t1 (ns).  The hook
        sends one every heartbeat_ms from its I/O thread: a clock of the
        hook's own, which does not run on while the hook's process does not
        run (a loaded machine), to tell "at once" from "after a while"."""
        return [r for r in self.messages("heartbeat") if t0 < r["t"] < t1]

    def wait_heartbeats(self, n, since, timeout=30.0):
        """Waits until n heartbeats have come after since (ns): the hook's
        I/O thread has gone round n times since then."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.heartbeats_between(since, float("inf"))) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("fewer than %d heartbeats within %.0f s" % (n, timeout))
                self.cond.wait(left)

    # ---- what the test does -------------------------------------------------

    def send(self, ident, msg):
        self.outbox.put((ident, msg))

    def grant(self, acquire=None, grant_id=None, quantum_us=0, timeout=30.0, epoch=None):
        """Grants the device of `acquire` (a record; default: the latest
        acquire) to its sender (with epoch: of that membership, else of its
        latest join when epochs are on).  Returns the grant's record once
        sent."""
        if acquire is None:
            acquire = self.wait_for("acquire", timeout)
            acquire = self.messages("acquire")[-1]
        n = self.count()
        msg = self._grant_msg(acquire["msg"]["device"], grant_id, quantum_us, acquire["ident"],
                              epoch)
        self.send(acquire["ident"], msg)
        return self.wait_for("grant", timeout, after=n, direction="out")

    def revoke(self, grant, reason="quantum", timeout=30.0):
        """Revokes a grant (a record of a grant sent).  Returns the revoke's
        record once sent."""
        n = self.count()
        g = grant["msg"]
        self.send(grant["ident"], {"v": 1, "type": "revoke", "device": g["device"],
                                   "grant_id": g["grant_id"], "reason": reason})
        return self.wait_for("revoke", timeout, after=n, direction="out")

    def connections_before_mine(self, after=0):
        """How many connections (from record `after` on) the broker accepted
        before one this call makes: a test's proof that nobody connected,
        with no window to wait out.  The listening socket accepts in the
        order connections were made, every accept is recorded before any
        message that came later, and this connection's message comes after
        its own accept: so a connection made before this call, even by a
        process gone since, is counted."""
        import uuid
        token = uuid.uuid4().hex
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        try:
            s.connect(self.endpoint)
            s.send(json.dumps({"v": 1, "type": "_sync", "token": token}).encode())
            mine = self.wait_for("_sync", pred=lambda m: m.get("token") == token)
        finally:
            s.close(0)
        with self.cond:
            i = next(k for k, r in enumerate(self.records) if r is mine)
            return sum(1 for r in self.records[after:i]
                       if r["dir"] == "event" and r["msg"]["type"] == "_accepted") - 1


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
