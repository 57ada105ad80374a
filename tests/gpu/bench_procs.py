"""What the GPU validation scripts that drive 'notebooks' share
(park_rotation.py, pressure.py): a line from a process within a timeout,
the broker started on an endpoint of its own, the launcher's part played by
bench/cell_driver (one process, usable from several threads), children that
die with the script, and the machine's sizes (GPU memory, /proc/meminfo)."""
import ctypes
import os
import select
import signal
import subprocess
import threading
import time


def readline(proc, timeout):
    """A line from proc's stdout within timeout seconds (select, no sleeps);
    TimeoutError, or EOFError when the process closed it (died)."""
    ready, _, _ = select.select([proc.stdout], [], [], max(0.0, timeout))
    if not ready:
        raise TimeoutError("no answer within %ds" % timeout)
    line = proc.stdout.readline()
    if not line:
        raise EOFError("the process closed its output (rc %s)" % proc.poll())
    return line.strip()


def _die_with_parent():
    """In a child before exec: SIGKILL when the script dies, however it
    dies, so that a killed run leaves no notebook holding the GPU."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass


def spawn(args, env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None):
    """A child of this script (text pipes) that dies with it."""
    return subprocess.Popen(args, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=True,
                            preexec_fn=_die_with_parent)


def start_broker(carry, endpoint, log_path, settings=(), event_log=None, env=None):
    """gpushare-broker -v on endpoint (an ipc:// path) with `settings`
    ("key=value", each a --set); returns the process once its socket is
    there (30 s at most)."""
    sock = endpoint[len("ipc://"):]
    os.makedirs(os.path.dirname(sock), exist_ok=True)
    args = [os.path.join(carry, "gpushare", "gpushare-broker"), "-v", "-e", endpoint]
    for kv in settings:
        args += ["--set", kv]
    if event_log:
        args += ["--event-log", event_log]
    broker = spawn(args, env, stdin=subprocess.DEVNULL, stdout=None,
                   stderr=open(log_path, "w"))
    deadline = time.time() + 30
    while not os.path.exists(sock):
        if broker.poll() is not None or time.time() > deadline:
            raise SystemExit("broker did not start (see %s)" % log_path)
        time.sleep(0.05)  # waiting for a process to bind: no event to await
    return broker


def stop_broker(broker, timeout=60):
    """SIGTERM (the broker unparks what is parked), then SIGKILL."""
    if broker.poll() is None:
        broker.send_signal(signal.SIGTERM)
    try:
        broker.wait(timeout)
    except subprocess.TimeoutExpired:
        broker.kill()
        broker.wait()
    return broker.returncode


def shut_down(workers, driver, broker, broker_timeout=120, worker_timeout=60):
    """The end of a run: every worker told to quit, the cell driver closed,
    the broker stopped (SIGTERM: it unparks whatever is parked), then the
    workers waited for (killed if they hang)."""
    for w in workers:
        try:
            w.stdin.write("quit\n")
            w.stdin.flush()
        except Exception:
            pass
    driver.close()
    stop_broker(broker, broker_timeout)
    for w in workers:
        try:
            w.wait(worker_timeout)
        except subprocess.TimeoutExpired:
            w.kill()


class CellDriver:
    """bench/cell_driver: registers sessions and says when their cells
    start and end, as gpushare-launch's watcher does.  One command at a
    time; threads take turns."""

    def __init__(self, carry, endpoint, env):
        self.proc = spawn([os.path.join(carry, "gpushare", "cell_driver"), endpoint], env)
        self.lock = threading.Lock()

    def drive(self, cmd, timeout=30):
        with self.lock:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
            return readline(self.proc, timeout)

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()


def meminfo():
    """/proc/meminfo in bytes: {"MemTotal": ..., "MemAvailable": ...}."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            words = rest.split()
            if words and words[0].isdigit():
                out[key] = int(words[0]) * (1024 if words[1:] == ["kB"] else 1)
    return out


def gpu_total_bytes(index=0):
    """The GPU's memory from nvidia-smi (no CUDA context in this process:
    it would take GPU memory from the notebooks), else from torch."""
    try:
        r = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=memory.total",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            return int(r.stdout.split()[0]) << 20
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass
    import torch
    return torch.cuda.get_device_properties(index).total_memory


def parse_size(text):
    """"16G", "512M", "1024" (bytes, binary units), as the simulator reads them."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().replace("IB", "").rstrip("B")
    suffix = t[-1:] if t[-1:] in "KMGT" else ""
    return int(t[:-1] if suffix else t) * units[suffix]
