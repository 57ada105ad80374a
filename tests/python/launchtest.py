"""Helpers of the launcher and provisioner tests (test_launch_*.py,
test_provisioner.py): finding cell watchers in /proc, a stand-in broker
that answers register, kernels started the way a notebook server starts
them, and the broker's view of a session."""
import os
import time
import uuid

import fakebroker
import gstest

PROVISIONER_PATH = os.path.join(gstest.BUILDDIR, "kernelspecs", "pythonpath")


class LaunchBroker(fakebroker.FakeBroker):
    """The hook tests' stand-in broker, answering register and unregister
    as the real one does (the session is the kernel id)."""

    def _answer(self, ident, msg):
        t = msg.get("type")
        if t == "register":
            reply = {"v": 1, "type": "registered", "session": msg["kernel_id"]}
        elif t == "unregister":
            reply = {"v": 1, "type": "ok"}
        else:
            return super()._answer(ident, msg)
        if "seq" in msg:
            reply["seq"] = msg["seq"]
        self._send_now(ident, reply)


def _stat(pid):
    """(comm, state, ppid) of a process, or None."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    return comm, fields[0], int(fields[1])


def all_watchers():
    """Pids of every live (not zombie) gpushare-watch process."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(d)
            if st and st[0] == "gpushare-watch" and st[1] != "Z":
                found.append(int(d))
    return found


def watchers_of(pid):
    """Pids of the live gpushare-watch processes whose parent is pid."""
    return [w for w in all_watchers() if (_stat(w) or ("", "", 0))[2] == pid]


def orphan_watchers(before=()):
    """Watchers (not in before) whose parent is no longer a kernel: they
    should not exist for more than a moment."""
    return [w for w in all_watchers() if w not in before and
            (_stat(w) or ("", "", 1))[2] == 1]


def pid_gone(pid):
    st = _stat(pid)
    return st is None or st[1] == "Z"


def wait_until(pred, timeout=10.0, what="condition", interval=0.01):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(interval)


def sessions(broker):
    """The broker's sessions (of GPU 0) by id."""
    st = broker.status()
    return {s["id"]: s for g in st.get("gpus", [])[:1] for s in g["sessions"]}


def kernel_pid(km):
    return km.provisioner.process.pid


class Kernels:
    """Kernels started through a MultiKernelManager, as a notebook server
    does (connection files named kernel-<id>.json)."""

    def __init__(self, tmp_path, kernels_dir):
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.multikernelmanager import MultiKernelManager
        self.tmp_path = tmp_path
        self.mkm = MultiKernelManager(
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]),
            connection_dir=str(tmp_path))
        self.clients = {}
        self.logs = {}
        self.files = []

    def start(self, env, name="shared-gpu"):
        log = self.tmp_path / ("kernel-%s.stderr" % uuid.uuid4().hex[:8])
        err = open(log, "w")  # open while the kernel lives: a restart reuses it
        self.files.append(err)
        kid = self.mkm.start_kernel(kernel_name=name, env=env, stderr=err)
        km = self.mkm.get_kernel(kid)
        kc = gstest.skip_late_kernel_info(km.client())
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        self.clients[kid] = kc
        self.logs[kid] = log
        return kid, km, kc

    def log(self, kid):
        return self.logs[kid].read_text()

    def close(self):
        for kc in self.clients.values():
            kc.stop_channels()
        for kid in list(self.mkm.list_kernel_ids()):
            try:
                self.mkm.shutdown_kernel(kid, now=True)
            except Exception:
                pass
        for f in self.files:
            f.close()
