"""Helpers of the tests that run Jupyter's web servers (test_jupyterhub.py,
test_browser.py): free loopback ports, a kernel's websocket driven the way
the notebook page drives it, and cleaning up process trees that do not
stay under their parent (JupyterHub starts its proxy and the users' servers
in sessions of their own)."""
import asyncio
import ctypes
import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid

PR_SET_CHILD_SUBREAPER = 36


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def become_subreaper():
    """Orphans of the processes this test starts (a hub's proxy and servers
    when the hub dies first, chromium's helpers) become this process's
    children instead of init's, so that kill_strays() finds them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _procs():
    """{pid: (ppid, state)} of every process, zombies included."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(d)] = (int(fields[1]), fields[0])
    return out


def descendants(pid, procs=None):
    procs = _procs() if procs is None else procs
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, (pp, _) in procs.items() if pp == p]
        found += kids
        todo += kids
    return found


def stop(proc, timeout=60):
    """SIGTERM a process we started (a hub, a notebook server shut their
    children down on it) and wait for it; SIGKILL when it does not end."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


def kill_strays(keep=(), timeout=30):
    """SIGKILL every process under this one except the pids in keep (and
    theirs), and reap those that are (or become, as orphans) our children;
    with become_subreaper() that covers orphans.  Returns the command lines
    of the live ones killed, for the test to report."""
    procs = _procs()
    keep_all = set(keep)
    for k in keep:
        keep_all.update(descendants(k, procs))
    strays = [p for p in descendants(os.getpid(), procs) if p not in keep_all]
    names = []
    for p in strays:
        if procs[p][1] == "Z":
            continue
        try:
            with open("/proc/%d/cmdline" % p, "rb") as f:
                names.append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    for p in strays:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(p, os.WNOHANG)[0] == p:
                    break
            except ChildProcessError:  # not (yet) ours: wait until its parent reaps it
                if p not in _procs():
                    break
            time.sleep(0.05)
    return names


class KernelChannel:
    """A kernel's websocket (api/kernels/ID/channels) as the notebook page
    uses it: execute() sends a cell, reply() awaits its end and returns
    (reply content, stdout, stderr).  The websocket lives on an event loop
    of its own thread, which reads every message as it comes (and so
    answers the server's pings however long the test waits)."""

    def __init__(self, url, token, timeout=60):
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        self.session = uuid.uuid4().hex
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        req = HTTPRequest(url, headers={"Authorization": "token " + token},
                          connect_timeout=timeout, request_timeout=timeout)

        async def connect():
            self.ws = await websocket_connect(req)
            self.messages = asyncio.Queue()
            self.reader = asyncio.ensure_future(self._read())

        try:
            self._run(connect(), timeout)
        except BaseException:
            self._stop_loop()
            raise

    async def _read(self):
        while True:
            raw = await self.ws.read_message()
            self.messages.put_nowait(raw)
            if raw is None:  # closed
                return

    def _run(self, coro, timeout):
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout),
                                                self.loop).result()

    def execute(self, code):
        msg_id = uuid.uuid4().hex
        msg = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                          "session": self.session, "version": "5.3", "date": ""},
               "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
               "content": {"code": code, "silent": False, "store_history": True,
                           "user_expressions": {}, "allow_stdin": False,
                           "stop_on_error": True}}

        async def send():
            await self.ws.write_message(json.dumps(msg))

        self._run(send(), 30)
        return msg_id

    def reply(self, msg_id, timeout=120):
        """The cell's execute_reply content and its streams, once the kernel
        has gone idle after it (all its output has arrived by then)."""
        streams = {"stdout": "", "stderr": ""}

        async def collect():
            content, idle = None, False
            while content is None or not idle:
                raw = await self.messages.get()
                if raw is None:
                    raise AssertionError("the kernel's websocket closed")
                m = json.loads(raw)
                if m.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                t = m["header"]["msg_type"]
                if t == "stream":
                    streams[m["content"]["name"]] += m["content"]["text"]
                elif t == "execute_reply":
                    content = m["content"]
                elif t == "status" and m["content"]["execution_state"] == "idle":
                    idle = True
            return content

        content = self._run(collect(), timeout)
        return content, streams["stdout"], streams["stderr"]

    def run(self, code, timeout=120):
        return self.reply(self.execute(code), timeout)

    def close(self):
        """Close the websocket, wait for the server's side of it, and end
        the loop's thread with no task left pending."""
        async def close():
            self.ws.close()
            await self.reader

        try:
            self._run(close(), 30)
        except Exception:
            pass
        self._stop_loop()

    def _stop_loop(self):
        async def cancel_the_rest():
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()
