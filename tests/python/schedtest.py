"""Helpers for the scheduler's integration tests (test_sched_*.py): worker
processes running simulated kernels with the real hook preloaded, a fake
launcher on a raw DEALER socket, and waiting for conditions on the
simulated driver's execution log or the broker's status with a deadline.

Run as a program, this file is the worker:
    schedtest.py loop US [NAME]   kernel + synchronize forever (a training
                                  loop); prints "first" after the first one
    schedtest.py steps US [NAME]  reads "run N" lines from stdin, runs N
                                  kernel+synchronize steps, prints "done N"
"""
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def sim_env(sim):
    """The simulated GPU, able to run 4 kernels at once: overlapping work
    would show in the log.  The first process to attach (the broker) sets
    it for all."""
    return dict(sim, GPUSHARE_SIM_CONCURRENCY="4")


def worker_env(sim, endpoint, **extra):
    """The simulated GPU's environment with the hook preloaded."""
    import gstest
    env = sim_env(sim)
    env.update({"LD_PRELOAD": gstest.HOOK, "GPUSHARE_BROKER": endpoint})
    for k in ("GPUSHARE_DISABLE", "GPUSHARE_SESSION", "GPUSHARE_IDLE_RELEASE_MS"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Worker:
    """A worker process; lines it prints are collected."""

    def __init__(self, env, mode, us, name, tmp_path):
        import gstest
        self.name = name
        self.lines = []
        self.cond = threading.Condition()
        self.err_path = tmp_path / ("%s.stderr" % name)
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [gstest.PYTHON, os.path.join(HERE, "schedtest.py"), mode, str(us), name],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def pid(self):
        return self.proc.pid

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.strip())
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def expect(self, text, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while text not in self.lines:
                if None in self.lines:
                    raise AssertionError("%s ended before %r: %s" % (self.name, text,
                                                                     self.stderr()))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s: no %r within %.1f s: %s; stderr: %s" % (
                        self.name, text, timeout, self.lines[-5:], self.stderr()))
                self.cond.wait(left)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stderr(self):
        return self.err_path.read_text() if self.err_path.exists() else ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


def wait_until(pred, timeout=10.0, what="condition", interval=0.005):
    """Polls pred() until it returns something true; returns that."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def kernels(env, pid=None):
    path = env["GPUSHARE_SIM_LOG"]
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("op") == "kernel" and (pid is None or r["pid"] == pid):
                    out.append(r)
    return sorted(out, key=lambda r: r["start_ns"])


def overlaps(ks):
    """Pairs of kernels of different processes that ran at the same time."""
    bad = []
    ks = sorted(ks, key=lambda r: r["start_ns"])
    for i, a in enumerate(ks):
        for b in ks[i + 1:]:
            if b["start_ns"] >= a["end_ns"]:
                break
            if b["pid"] != a["pid"]:
                bad.append((a, b))
    return bad


def runs(ks):
    """Consecutive kernels of one process: [(pid, first start, last end, n)]."""
    out = []
    for k in sorted(ks, key=lambda r: r["start_ns"]):
        if out and out[-1][0] == k["pid"]:
            pid, s, _, n = out[-1]
            out[-1] = (pid, s, k["end_ns"], n + 1)
        else:
            out.append((k["pid"], k["start_ns"], k["end_ns"], 1))
    return out


class Client:
    """A raw protocol client (pyzmq DEALER): the fake launcher, or `set`."""

    def __init__(self, endpoint, role="launcher"):
        import zmq
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 3000)
        self.sock.connect(endpoint)
        self.seq = 0
        r = self.call({"type": "hello", "role": role, "pid": os.getpid()})
        assert r["type"] == "welcome", r

    def send(self, msg):
        self.seq += 1
        self.sock.send(json.dumps(dict(msg, v=1, seq=self.seq)).encode())

    def call(self, msg):
        self.send(msg)
        while True:
            reply = json.loads(self.sock.recv())
            if reply.get("seq") == self.seq:
                return reply

    def register(self, kernel_id, pid):
        r = self.call({"type": "register", "kernel_id": kernel_id, "user": "tester",
                       "notebook": kernel_id + ".ipynb", "pid": pid})
        assert r["type"] == "registered", r
        return r["session"]

    def cell(self, session, state, msg_id="m"):
        self.send({"type": "cell", "session": session, "state": state, "msg_id": msg_id})

    def close(self):
        self.sock.close()


def configure(endpoint, **settings):
    """Changes the broker's settings with a `set` message (skips the test
    on a broker that cannot be configured yet)."""
    c = Client(endpoint, "cli")
    try:
        r = c.call({"type": "set", "settings": settings})
        if r.get("code") == "not_implemented":
            import pytest
            pytest.skip("this broker does not handle `set` yet")
        assert r["type"] == "ok", r
    finally:
        c.close()


def session_of(status, pid):
    """The session entry (on GPU 0) holding pid, or None."""
    for s in status["gpus"][0]["sessions"]:
        if pid in s["pids"]:
            return s
    return None


def _work(argv):
    import gpusim
    mode, us, name = argv[0], int(argv[1]), (argv[2] if len(argv) > 2 else "kernel")
    gpusim.init()
    if mode == "loop":
        first = True
        while True:
            gpusim.launch(us=us, name=name)
            gpusim.synchronize()
            if first:
                print("first", flush=True)
                first = False
    for line in sys.stdin:
        n = int(line.split()[1])
        for _ in range(n):
            gpusim.launch(us=us, name=name)
            gpusim.synchronize()
        print("done %d" % n, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_work(sys.argv[1:]))
