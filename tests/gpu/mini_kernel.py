"""mini_kernel: a stand-in for ipykernel where Jupyter is not installed (the
H200 machine has PyTorch but no Jupyter and no pyzmq).

It does the one thing gpushare-launch's cell watcher observes of a kernel:
it publishes IOPub `status` messages, busy then idle, whose parent is an
`execute_request`, on the IOPub port of a real Jupyter connection file,
signed with its key (hmac-sha256, the Jupyter wire protocol).  Everything
else a real kernel does is out of the watcher's sight, so the launcher,
the hook and the broker run exactly as under a notebook.

    python3 mini_kernel.py --write-connection kernel-ID.json
    gpushare-launch -- python3 mini_kernel.py -f kernel-ID.json SCRIPT [ARGS]

runs SCRIPT as __main__; the script marks its cells with

    from mini_kernel import cell
    with cell():
        ...GPU work of one notebook cell...

Without -f (a native baseline run) cell() marks nothing.  ZeroMQ is reached
through ctypes (libzmq.so.5; on the GPU machine from .carry/lib).  The
socket is an XPUB, so the first cell waits (at most WATCH_WAIT_S) until the
watcher has subscribed: a PUB would drop the first status messages.
"""
import contextlib
import ctypes
import datetime
import hashlib
import hmac
import json
import os
import runpy
import sys
import time
import uuid

WATCH_WAIT_S = 10.0
ZMQ_SNDMORE, ZMQ_XPUB, ZMQ_RCVTIMEO, ZMQ_LINGER = 2, 9, 27, 17


class _IOPub:
    def __init__(self, conn_path):
        with open(conn_path) as f:
            conn = json.load(f)
        if conn.get("signature_scheme", "hmac-sha256") != "hmac-sha256":
            raise SystemExit("mini_kernel: %s: only hmac-sha256 is supported" % conn_path)
        self.key = conn["key"].encode()
        self.session = str(uuid.uuid4())
        self.kernel_id = os.path.basename(conn_path)[len("kernel-"):-len(".json")]
        z = ctypes.CDLL("libzmq.so.5", use_errno=True)
        z.zmq_ctx_new.restype = ctypes.c_void_p
        z.zmq_socket.restype = ctypes.c_void_p
        z.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
        z.zmq_bind.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        z.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
        z.zmq_recv.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
        z.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
        z.zmq_close.argtypes = [ctypes.c_void_p]
        self.z = z
        self.sock = z.zmq_socket(z.zmq_ctx_new(), ZMQ_XPUB)
        zero = ctypes.c_int(0)
        z.zmq_setsockopt(self.sock, ZMQ_LINGER, ctypes.byref(zero), 4)
        if conn.get("transport", "tcp") == "ipc":
            addr = "ipc://%s-%d" % (conn["ip"], conn["iopub_port"])
        else:
            addr = "tcp://%s:%d" % (conn["ip"], conn["iopub_port"])
        if z.zmq_bind(self.sock, addr.encode()) != 0:
            raise SystemExit("mini_kernel: cannot bind IOPub %s (errno %d)" % (addr, ctypes.get_errno()))
        self.subscribed = False

    def _wait_subscriber(self):
        """XPUB hands us the subscription: then the watcher hears everything."""
        ms = ctypes.c_int(int(WATCH_WAIT_S * 1000))
        self.z.zmq_setsockopt(self.sock, ZMQ_RCVTIMEO, ctypes.byref(ms), 4)
        buf = ctypes.create_string_buffer(256)
        n = self.z.zmq_recv(self.sock, buf, 256, 0)
        if n < 1 or buf.raw[0] != 1:
            print("mini_kernel: no IOPub subscriber within %.0f s; cells go unwatched" % WATCH_WAIT_S,
                  file=sys.stderr)
        self.subscribed = True

    def status(self, state, parent):
        if not self.subscribed:
            self._wait_subscriber()
        header = {"msg_id": str(uuid.uuid4()), "msg_type": "status", "username": "mini",
                  "session": self.session, "version": "5.3",
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat()}
        parts = [json.dumps(p).encode() for p in
                 (header, parent, {}, {"execution_state": state})]
        sig = hmac.new(self.key, b"".join(parts), hashlib.sha256).hexdigest().encode()
        frames = [("kernel.%s.status" % self.kernel_id).encode(), b"<IDS|MSG>", sig] + parts
        for i, fr in enumerate(frames):
            self.z.zmq_send(self.sock, fr, len(fr), ZMQ_SNDMORE if i < len(frames) - 1 else 0)


_iopub = None
cells_run = []  # (start, end) monotonic seconds of every cell, for the caller's statistics


@contextlib.contextmanager
def cell():
    """One notebook cell: busy before, idle after, as ipykernel publishes."""
    parent = {"msg_id": str(uuid.uuid4()), "msg_type": "execute_request",
              "session": "mini", "username": "mini", "version": "5.3"}
    if _iopub:
        _iopub.status("busy", parent)
    t0 = time.monotonic()
    try:
        yield
    finally:
        cells_run.append((t0, time.monotonic()))
        if _iopub:
            _iopub.status("idle", parent)


def write_connection_file(path):
    """A connection file as jupyter_client writes one (loopback, fresh key,
    free ports), for runs without a notebook server."""
    import socket
    ports = []
    for _ in range(5):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s)
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    conn = dict(zip(names, [s.getsockname()[1] for s in ports]), ip="127.0.0.1",
                transport="tcp", signature_scheme="hmac-sha256", key=str(uuid.uuid4()),
                kernel_name="shared-gpu")
    for s in ports:
        s.close()
    with open(path, "w") as f:
        json.dump(conn, f)


def main(argv):
    global _iopub
    args = argv[1:]
    if len(args) == 2 and args[0] == "--write-connection":
        write_connection_file(args[1])
        return
    if len(args) >= 2 and args[0] == "-f":
        _iopub = _IOPub(args[1])
        args = args[2:]
    if not args:
        raise SystemExit("usage: mini_kernel.py [-f CONNECTION_FILE] SCRIPT [ARGS...]")
    sys.modules["mini_kernel"] = sys.modules[__name__]
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
