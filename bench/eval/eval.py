#!/usr/bin/env python3
"""bench/eval/eval.py - the evaluation suite's orchestrator (issue 8).

    python3 bench/eval/eval.py --out DIR SECTION...      (bench/eval/run.sh calls it)

Sections (each well under 10 minutes on the H200; see bench/README.md):
  cost         PyTorch training/inference and a null-kernel launch loop: stock,
               hook with the scheduler off, adaptive, exclusive, interleaved
  pairs        two notebooks, small working sets: serial, native concurrent,
               the thesis' exclusive with tq 1..60 s, burst, adaptive
  bigpairs     the same with working sets that together exceed the GPU memory
               left by a ballast process: serial, native (refused), adaptive
               and exclusive, through parking
  bigpairs32   bigpairs with 32 GiB working sets (the switch costs more than
               the phases it could hide in)
  capacity     the memory-pressure bench (tests/gpu/pressure.py): more notebooks
               than the GPU holds, taking turns, every cell checked bit-exact
  park         32 GiB parked and unparked, switches between 60 GB notebooks
               (tests/gpu/park_rotation.py; a real GPU only)
  interactive  A trains, B runs short cells: B's latency, A's throughput
  reclaim      after a holder's cell ends, how long until a waiter runs; the
               memory an idle notebook keeps
  scale        1 to 32 mostly idle notebooks with random cells

Standard library only: the GPU work happens in bench/eval/notebook.py,
started as notebooks through gpushare-launch and tests/gpu/mini_kernel.py
(real IOPub busy/idle, so the launcher, hook and broker run as under
Jupyter), or natively without either.  Each section writes CSV files and a
meta-SECTION.json (command, knobs, repetitions, wall time) into DIR, plus
each broker's event log and every process' stderr.

Knobs (environment): EVAL_BACKEND=torch|sim, EVAL_SCALE (multiplies every
duration; 0.05 for a smoke run), and the EVAL_* values listed in KNOBS."""
import argparse
import csv
import grp
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MINI = os.path.join(ROOT, "tests", "gpu", "mini_kernel.py")
NOTEBOOK = os.path.join(HERE, "notebook.py")
BALLAST = os.path.join(HERE, "ballast.py")
GIB = 1 << 30

SIM = os.environ.get("EVAL_BACKEND", "torch") == "sim"
# (name, default on the GPU, default on the simulated GPU, meaning)
KNOBS = [
    ("EVAL_SCALE", "1", "1", "multiplies every duration"),
    ("EVAL_COST_ROUNDS", "3", "2", "cost: interleaved rounds"),
    ("EVAL_NULL_BATCHES", "600", "20", "cost: null_launch batches of 256 launches"),
    ("EVAL_AB_ROUNDS", "30", "2", "cost: in-process A/B rounds (4 batches each: gate on, off)"),
    ("EVAL_AB_BATCH_S", "0.1", "0.05", "cost: seconds of one A/B batch (at least 25 steps)"),
    ("EVAL_PAIR_ITERS", "4", "3", "pairs: GPU+CPU iterations per job"),
    ("EVAL_PAIR_PERIOD_S", "1.0", "1.0", "pairs: seconds of one iteration, solo"),
    ("EVAL_TQS", "1,2,5,10,20,60", "1,60", "pairs: the thesis' exclusive quanta, s"),
    ("EVAL_SMALL_GIB", "2", "0.02", "pairs: small working set per job"),
    ("EVAL_BIG_GIB", "4", "0.1", "bigpairs/reclaim: big working set per job"),
    ("EVAL_BIG_FREE_GIB", "6", "0.15", "bigpairs/reclaim: GPU memory left by the ballast"),
    ("EVAL_BIG_POLICIES", "adaptive,exclusive", "adaptive,exclusive", "bigpairs: policies"),
    ("EVAL_BIG32_GIB", "32", "0.2", "bigpairs32: big working set per job"),
    ("EVAL_BIG32_FREE_GIB", "48", "0.3", "bigpairs32: GPU memory left by the ballast"),
    ("EVAL_PRESSURE_CONFIGS", "many disk", "many disk", "capacity: tests/gpu/pressure.py's configs"),
    ("EVAL_PRESSURE_DEADLINE_S", "420", "100", "capacity: seconds the memory-pressure bench may take"),
    ("EVAL_PARK_GIB", "32", "-", "park: the notebooks whose park and unpark are timed, GiB"),
    ("EVAL_SWITCH_GIB", "56", "-", "park: the notebooks whose switches are timed (56 GiB: 60 GB)"),
    ("EVAL_INTER_S", "20", "20", "interactive: seconds of each shared run"),
    ("EVAL_INTER_EVERY_S", "1.5", "1.5", "interactive: B starts a cell this often"),
    ("EVAL_INTER_WORKS_MS", "10,50,200", "10,50,200", "interactive: B's cells, ms of GPU work"),
    ("EVAL_INTER_ALONE_S", "6", "2", "interactive: A alone before each shared run, s"),
    ("EVAL_INTER_WINDOW_S", "4.5", "10", "interactive: the trainer's loss, windows with and without B, s"),
    ("EVAL_INTER_WINDOWS", "6", "2", "interactive: the trainer's loss, windows with B (one more without)"),
    ("EVAL_RECLAIM_REPS", "8", "3", "reclaim: repetitions (the thesis' 5 s: half)"),
    ("EVAL_SCALE_NS", "1,2,4,8,16,32", "1,2,4", "scale: notebook counts"),
    ("EVAL_SCALE_S", "12", "12", "scale: seconds per count"),
    ("EVAL_SCALE_LONG", "8=60", "-", "scale: counts that run longer (N=seconds,...): p99 of more cells"),
    ("EVAL_SCALE_GAP_S", "3", "3", "scale: mean pause between a notebook's cells"),
    ("EVAL_SCALE_NATIVE", "1", "0", "scale: also run each N natively (the driver's time slicing)"),
    ("EVAL_SCALE_BOOSTS", "100", "-", "scale: for the counts of EVAL_SCALE_LONG, also with these "
     "boost_ms (the two-level queue's first level; the default is 500)"),
    ("EVAL_THESIS_IDLE_MS", "5000", "5000", "the thesis' idle release, ms (a test shortens it)"),
    ("EVAL_SIM_MEMORY", "-", "2G", "sim: the simulated GPU's memory"),
    ("EVAL_SECTION_TIMEOUT", "480", "480", "run.sh: seconds a section may take"),
    ("EVAL_DEADLINE_S", "570", "570", "run.sh: seconds the whole command may take"),
]


def knob(name, typ=str):
    default = next(k[2] if SIM else k[1] for k in KNOBS if k[0] == name)
    return typ(os.environ.get(name, default))


def knob_list(name, typ=float):
    return [typ(x) for x in knob(name).split(",") if x.strip()]


SCALE = knob("EVAL_SCALE", float)


def dur(seconds):
    """A duration of the suite, scaled by EVAL_SCALE."""
    return seconds * SCALE


now = time.monotonic


def log(*a):
    print("[%7.1f]" % (now() - T0), *a, file=sys.stderr, flush=True)


T0 = now()


# ---- processes --------------------------------------------------------------------

_children = []  # every process we started, for the cleanup
_brokers = []
_pidfile = None


def spawn(argv, env, logfile, stdin=subprocess.PIPE, stdout=subprocess.PIPE):
    """A child in a session of its own, so that the cleanup can end it and
    everything it started (the launcher's watcher) by its process group."""
    p = subprocess.Popen(argv, env=env, stdin=stdin, stdout=stdout,
                         stderr=open(logfile, "a"), text=True, start_new_session=True)
    _children.append(p)
    if _pidfile:  # for run.sh, should we be killed before our own cleanup
        with open(_pidfile, "a") as f:
            f.write("%d\n" % p.pid)
    return p


def _end(procs, grace):
    live = [p for p in procs if p.poll() is None]
    for p in live:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = now() + grace
    for p in live:
        try:
            p.wait(max(0.1, deadline - now()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def end_children():
    """Brokers first (on SIGTERM a broker unparks every parked notebook,
    which could not exit otherwise), then every other process group we
    started: SIGTERM, SIGKILL after a grace period."""
    _end(_brokers, 40)
    _end(_children, 5)
    del _children[:], _brokers[:]


def shutdown(nbs, broker=None):
    """The normal end: notebooks quit; those not parked exit and give their
    memory back; then the broker's exit unparks the rest, which then exit."""
    for nb in nbs:
        nb.quit()
    deadline = now() + 20
    for nb in nbs:
        try:
            nb.proc.wait(max(0.1, deadline - now()))
        except subprocess.TimeoutExpired:
            pass  # parked: it exits once the broker has brought it back
    if broker:
        broker.stop()
    for nb in nbs:
        try:
            nb.proc.wait(30)
        except subprocess.TimeoutExpired:
            log("notebook %s did not exit" % nb.name)


class Setup:
    """Paths and environment for the backend: .carry/ on the GPU machine,
    the build tree and the simulated driver here."""

    def __init__(self, out):
        self.out = out
        self.tmp = tempfile.mkdtemp(prefix="gse", dir="/tmp")  # ipc paths hold 107 bytes
        self.py = os.environ.get("EVAL_PYTHON", sys.executable)
        env = dict(os.environ)
        for k in ("LD_PRELOAD", "GPUSHARE_SESSION", "GPUSHARE_KERNEL_ID", "GPUSHARE_BROKER",
                  "GPUSHARE_IDLE_RELEASE_MS", "NOTIFY_SOCKET"):
            env.pop(k, None)
        if SIM:
            b = os.environ.get("EVAL_BUILDDIR", ROOT)
            self.broker = os.path.join(b, "broker", "gpushare-broker")
            self.cli = os.path.join(b, "cli", "gpushare")
            self.launch = os.path.join(b, "launcher", "gpushare-launch")
            self.hook = os.path.join(b, "libhook", ".libs", "libgpushare-hook.so")
            self.null_launch = None
            simlib = os.path.join(b, "tests", "simcuda", ".libs")
            env["LD_LIBRARY_PATH"] = simlib + ":" + env.get("LD_LIBRARY_PATH", "")
            env["PYTHONPATH"] = os.path.join(ROOT, "tests", "simcuda")
            env["GPUSHARE_SIM_NAME"] = "/gs-eval-%d" % os.getpid()
            env["GPUSHARE_SIM_MEMORY"] = knob("EVAL_SIM_MEMORY")
        else:
            c = os.environ.get("EVAL_CARRY", os.path.join(ROOT, ".carry"))
            self.broker = os.path.join(c, "gpushare", "gpushare-broker")
            self.cli = os.path.join(c, "gpushare", "gpushare")
            self.launch = os.path.join(c, "gpushare", "gpushare-launch")
            self.hook = os.path.join(c, "gpushare", "libgpushare-hook.so")
            self.null_launch = os.path.join(c, "bin", "null_launch")
            env["LD_LIBRARY_PATH"] = os.path.join(c, "lib") + ":" + env.get("LD_LIBRARY_PATH", "")
            # The restore helper a checkpointed process starts when its
            # broker is gone: the carry's, not an installed one (the hooks
            # said they had none).
            env["GPUSHARE_RESTORE_HELPER"] = os.path.join(c, "gpushare", "gpushare-restore")
        for f in (self.broker, self.cli, self.launch, self.hook):
            if not os.path.exists(f):
                raise SystemExit("eval.py: %s is missing (bash tests/gpu/make_carry.sh, or make)" % f)
        env["GPUSHARE_HOOK"] = self.hook  # what gpushare-launch preloads
        self.env = env

    def close(self):
        if SIM:
            try:
                os.unlink("/dev/shm/" + self.env["GPUSHARE_SIM_NAME"].lstrip("/"))
            except FileNotFoundError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


class Broker:
    """A gpushare-broker of our own: private ipc socket, event log, a config
    file that makes our group its admins (for `gpushare set`); awaited
    through its systemd readiness notification."""

    def __init__(self, S, name, policy="adaptive", settings=None):
        self.S, self.name = S, name
        self.path = os.path.join(S.tmp, name + ".sock")
        self.endpoint = "ipc://" + self.path
        self.env = dict(S.env, GPUSHARE_BROKER=self.endpoint)
        conf = os.path.join(S.tmp, name + ".conf")
        with open(conf, "w") as f:
            f.write("admin_group = %s\n" % grp.getgrgid(os.getgid()).gr_name)
        self.events = os.path.join(S.out, "events-%s.jsonl" % name)
        argv = [S.broker, "-v", "-e", self.endpoint, "--config", conf, "--policy", policy,
                "--event-log", self.events]
        for k, v in (settings or {}).items():
            argv += ["--set", "%s=%s" % (k, v)]
        notify_path = os.path.join(S.tmp, name + ".notify")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(30)
        try:
            self.proc = spawn(argv, dict(self.env, NOTIFY_SOCKET=notify_path),
                              os.path.join(S.out, "broker-%s.log" % name), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL)
            _brokers.append(self.proc)
            while "READY=1" not in notify.recv(4096).decode().split("\n"):
                pass
        except socket.timeout:
            raise RuntimeError("broker %s did not become ready (broker-%s.log)" % (name, name))
        finally:
            notify.close()
        self.hz = os.sysconf("SC_CLK_TCK")
        log("broker %s ready (policy %s, %s)" % (name, policy, settings or {}))

    def cli(self, *args, timeout=15):
        r = subprocess.run([self.S.cli] + list(args), env=self.env, capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("gpushare %s: %s" % (" ".join(args), r.stderr.strip()))
        return r.stdout

    def set(self, **kw):
        self.cli("set", *["%s=%s" % kv for kv in kw.items()])
        log("broker %s: set %s" % (self.name, kw))

    def status(self):
        return json.loads(self.cli("status", "--json"))

    def cpu_s(self):
        """The broker's CPU time so far (utime + stime of /proc/PID/stat)."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.hz

    def wait_released(self, timeout=30):
        """Until nobody holds or waits for the GPU (the thesis' hooks keep a
        grant for 5 s after their last kernel): polled, with a deadline."""
        deadline = now() + timeout
        while now() < deadline:
            g = self.status()["gpus"][0]
            if not g["holders"] and not g["waiting"]:
                return True
            time.sleep(0.1)
        log("broker %s: still held after %d s: %s" % (self.name, timeout, g["holders"]))
        return False

    def stop(self, timeout=120):
        """SIGTERM: the broker unparks everyone before it exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Notebook:
    """One notebook process running bench/eval/notebook.py.  mode:
    native    stock: no hook, no launcher, no cells
    gpushare  gpushare-launch with its cell watcher (the product)
    thesis    the thesis' scheduler: hook, no cell watcher, idle release 5 s
    plain     hook, no cell watcher, the default idle release (200 ms)"""

    _ids = 0

    def __init__(self, S, name, mode, broker=None, extra_env=None):
        self.S, self.name, self.mode = S, name, mode
        env = dict(broker.env if broker else S.env, **(extra_env or {}))
        env["PYTHONUNBUFFERED"] = "1"
        if mode == "native":
            argv = [S.py, MINI, NOTEBOOK]
        elif mode == "gpushare":
            Notebook._ids += 1
            conn = os.path.join(S.tmp, "kernel-%s-%d.json" % (name, Notebook._ids))
            subprocess.run([S.py, MINI, "--write-connection", conn], check=True, env=env)
            argv = [S.launch, "--broker", broker.endpoint, "--strict", "--", S.py, MINI, "-f",
                    conn, NOTEBOOK]
        else:
            if mode == "thesis":
                env["GPUSHARE_IDLE_RELEASE_MS"] = knob("EVAL_THESIS_IDLE_MS")
                # The thesis reclaims no memory: no swap tier (the pool now
                # pins ahead, and would park this program there).
                env["GPUSHARE_SWAP"] = "off"
                # Nor does it make room for an allocation: one that does not
                # fit fails at once.  (With the hook's make_room, reclaim's
                # second thesis notebook waited for memory the first, on no
                # tier that could park it, never gave: 180 s on the H100.)
                env["GPUSHARE_MAKE_ROOM_TIMEOUT_MS"] = "0"
            argv = [S.launch, "--broker", broker.endpoint, "--no-watch", "--", S.py, MINI,
                    NOTEBOOK]
        self.proc = spawn(argv, env, os.path.join(S.out, "nb-%s.log" % name))
        self.pid = self.proc.pid  # gpushare-launch execs the kernel: same pid
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    self.q.put(json.loads(line))
                except ValueError:
                    pass
        self.q.put(None)

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def recv(self, timeout):
        try:
            m = self.q.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError("notebook %s: no answer within %.0f s (nb-%s.log)"
                               % (self.name, timeout, self.name))
        if m is None:
            raise RuntimeError("notebook %s exited (nb-%s.log)" % (self.name, self.name))
        if "error" in m and m.get("op") not in ("alloc",):
            raise RuntimeError("notebook %s: %s" % (self.name, m["error"]))
        return m

    def call(self, timeout, **cmd):
        self.send(**cmd)
        return self.recv(timeout)

    def ready(self, timeout=180):
        m = self.recv(timeout)
        assert m["op"] == "ready", m
        return self

    def quit(self):
        try:
            self.send(op="quit")
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass


def start_all(nbs, timeout=240):
    """Notebooks start in parallel (importing torch takes seconds); wait for all."""
    for nb in nbs:
        nb.ready(timeout)
    return nbs


def together(nbs, timeout, **cmd):
    """The same command to several notebooks at once; their answers."""
    for nb in nbs:
        nb.send(**cmd)
    return [nb.recv(timeout) for nb in nbs]


def total_time(results):
    return max(r["end"] for r in results) - min(r["start"] for r in results)


class Table(list):
    """Rows of one CSV file, written again after every row, so that a
    section stopped by its timeout leaves what it had measured."""

    def __init__(self, S, name, fields):
        super().__init__()
        self.path, self.fields = os.path.join(S.out, name), fields
        self._write()

    def add(self, **row):
        self.append(row)
        self._write()

    def extend_rows(self, rows):
        self.extend(rows)
        self._write()

    def _write(self):
        with open(self.path + ".tmp", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            w.writeheader()
            for r in self:
                w.writerow(r)
        os.replace(self.path + ".tmp", self.path)


def nvidia_smi(query, per="gpu"):
    """CSV rows of nvidia-smi, or None where there is none (the simulator)."""
    flag = "--query-gpu" if per == "gpu" else "--query-compute-apps"
    try:
        r = subprocess.run(["nvidia-smi", "%s=%s" % (flag, query), "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return [[x.strip() for x in line.split(",")] for line in r.stdout.splitlines() if line.strip()]


def gpu_free_gib(S):
    """Free memory of GPU 0 now (nvidia-smi; gpusim on the simulator)."""
    if SIM:
        r = subprocess.run([S.py, os.path.join(ROOT, "tests", "simcuda", "gpusim.py"), "info"],
                           env=S.env, capture_output=True, text=True, timeout=30)
        return json.loads(r.stdout)["free"] / GIB
    rows = nvidia_smi("memory.free")
    return float(rows[0][0]) / 1024 if rows else None


def pid_memory_mib():
    """GPU memory per process (nvidia-smi), {pid: MiB}; None without nvidia-smi."""
    rows = nvidia_smi("pid,used_memory", per="apps")
    if rows is None:
        return None
    out = {}
    for r in rows:
        try:
            out[int(r[0])] = float(r[1])
        except (ValueError, IndexError):
            pass
    return out


class GpuBusy:
    """GPU utilisation over a window: nvidia-smi sampled every 200 ms on the
    GPU; the simulator's busy time (gpusim) here."""

    def __init__(self, S):
        self.S = S
        self.proc = None

    def _sim_busy(self):
        r = subprocess.run([self.S.py, os.path.join(ROOT, "tests", "simcuda", "gpusim.py"), "info"],
                           env=self.S.env, capture_output=True, text=True, timeout=30)
        return json.loads(r.stdout)["busy_ns"] / 1e9

    def start(self):
        self.t0 = now()
        if SIM:
            self.b0 = self._sim_busy()
        else:
            self.samples = os.path.join(self.S.tmp, "util.csv")
            try:
                self.proc = spawn(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                   "-lms", "200"], self.S.env, os.path.join(self.S.out, "nvidia-smi.log"),
                                  stdin=subprocess.DEVNULL, stdout=open(self.samples, "w"))
            except OSError:
                self.proc = None

    def stop(self):
        """Mean utilisation in percent, or None."""
        if SIM:
            return 100.0 * (self._sim_busy() - self.b0) / (now() - self.t0)
        if not self.proc:
            return None
        self.proc.terminate()
        self.proc.wait()
        vals = []
        with open(self.samples) as f:
            for line in f:
                try:
                    vals.append(float(line.strip()))
                except ValueError:
                    pass
        return sum(vals) / len(vals) if vals else None


def calibrate(nb):
    c = nb.call(120, op="calibrate")
    log("calibrated: GPU unit %.3f ms, CPU unit %.3f ms" % (c["gpu_unit_ms"], c["cpu_unit_ms"]))
    return c


def units(ms, unit_ms):
    return max(1, int(round(ms / unit_ms)))


# ---- 1. cost when alone ------------------------------------------------------------

COST_WORK = [("mlp", "train", 200), ("mlp", "infer", 400), ("resnet18", "train", 60),
             ("resnet18", "infer", 120), ("resnet50", "train", 40), ("resnet50", "infer", 80)]
COST_CONFIGS = ["stock", "hook_off", "adaptive", "exclusive"]
BROKER_FOR = {"hook_off": {"scheduler": "off"}, "adaptive": {"scheduler": "on", "policy": "adaptive"},
              "exclusive": {"scheduler": "on", "policy": "exclusive"}}


def sec_cost(S, meta):
    rounds = knob("EVAL_COST_ROUNDS", int)
    br = Broker(S, "cost")
    stock = Notebook(S, "cost-stock", "native")
    hooked = Notebook(S, "cost-hooked", "gpushare", br)
    start_all([stock, hooked])
    rows = Table(S, "cost.csv", ["round", "config", "workload", "value", "wall_value", "unit",
                                 "steps", "paired_overhead_ns", "real_driver_ns"])
    # Untimed warm-up of every workload in both processes (model build,
    # cuDNN/cuBLAS heuristics), so round 1 is like the others.
    for nb in (stock, hooked):
        for model, mode, _ in COST_WORK:
            nb.call(300, op="bench", model=model, mode=mode, steps=3, warmup=2)
    batches = knob("EVAL_NULL_BATCHES", int)
    for rnd in range(rounds):
        # Rotate the order each round so that no configuration always runs
        # first after a pause.
        order = COST_CONFIGS[rnd % 4:] + COST_CONFIGS[:rnd % 4]
        for cfg in order:
            if cfg != "stock":
                br.set(**BROKER_FOR[cfg])
            nb = stock if cfg == "stock" else hooked
            for model, mode, steps in COST_WORK:
                n = max(3, int(steps * SCALE))
                r = nb.call(300, op="bench", model=model, mode=mode, steps=n, warmup=5)
                rows.add(round=rnd, config=cfg, workload="%s_%s" % (model, mode),
                         value=r["ms"], wall_value=r["wall_ms"], unit="ms/step", steps=n)
            # The null-kernel launch loop: a process of its own (no Python).
            env = dict(br.env)
            if cfg != "stock":
                env["LD_PRELOAD"] = S.hook
            if S.null_launch:
                argv = [S.null_launch, str(batches), "256"]
            else:
                argv = [S.py, NOTEBOOK, "--null-launch", str(batches), "256"]
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise RuntimeError("null_launch failed: %s" % r.stderr[-500:])
            nl = json.loads(r.stdout.strip().splitlines()[-1])
            for key, wl in (("runtime_ns", "null_launch_runtime"), ("elf_bound_ns", "null_launch_driver_api")):
                # Under the hook, null_launch also times the real driver's
                # entry point in the same process, batch for batch.
                rows.add(round=rnd, config=cfg, workload=wl, value=nl[key], wall_value="",
                         unit="ns/launch", steps=batches * 256,
                         paired_overhead_ns=nl.get("hook_overhead_ns_median_of_paired_diffs", ""),
                         real_driver_ns=nl["real_driver_ns"] if nl.get("real_driver_ns", -1) > 0 else "")
        log("cost: round %d done" % rnd)
    # The hook's cost in one process: batches with the gate in force and
    # bypassed alternate (notebook.py bench_ab), under the adaptive policy.
    br.set(**BROKER_FOR["adaptive"])
    ab = Table(S, "cost_ab.csv", ["workload", "round", "steps", "off_ms", "on_ms", "off_wall_ms",
                                  "on_wall_ms", "launches_per_step"])
    ab_rounds, batch_s = knob("EVAL_AB_ROUNDS", int), dur(knob("EVAL_AB_BATCH_S", float))
    for model, mode, _ in COST_WORK:
        ms = hooked.call(300, op="bench", model=model, mode=mode, steps=10, warmup=2)["ms"]
        steps = max(25 if not SIM else 3, int(batch_s * 1000 / max(ms, 1e-3) + 0.999))
        r = hooked.call(600, op="bench_ab", model=model, mode=mode, steps=steps, rounds=ab_rounds)
        if "error" in r:
            raise RuntimeError("bench_ab: %s" % r["error"])
        for x in r["rounds"]:
            ab.add(workload="%s_%s" % (model, mode), steps=4 * steps, **x)
        log("cost: in-process A/B %s_%s: %d x 4 batches of %d steps" % (model, mode, ab_rounds, steps))
    meta.update(repetitions=rounds, configs=COST_CONFIGS,
                workloads=[w[0] + "_" + w[1] for w in COST_WORK] + ["null_launch_runtime",
                                                                    "null_launch_driver_api"],
                ab_rounds=ab_rounds, ab_batch_s=batch_s,
                notes="one stock and one hooked notebook process; the broker's setting changed "
                      "between runs with gpushare set; the order of configurations rotates per round; "
                      "cost_ab.csv: in the hooked process, batches with the gate in force (on) and "
                      "bypassed (off, gpushare_hook_passthrough) in turn, adaptive policy")
    shutdown([stock, hooked], br)


# ---- 2. two notebooks contending (the thesis' Table 12.2) ---------------------------

MIXES = [("90/10", 0.9), ("50/50", 0.5)]


def job_cmd(cal, frac, period, iters):
    return dict(op="job", iters=iters, gpu_units=units(frac * period * 1000, cal["gpu_unit_ms"]),
                cpu_units=units((1 - frac) * period * 1000, cal["cpu_unit_ms"]))


def run_pair(nbs, cmd, timeout):
    res = together(nbs, timeout, **cmd)
    return total_time(res), res


def record_phases(S, section, working_set, mix, config, res):
    """Each job's phases as it saw them ([GPU s, CPU s, the CPU phase's
    thread CPU time s] per iteration), one line per job: where a pair's
    time went (a GPU phase under gpushare includes waiting for the GPU)."""
    with open(os.path.join(S.out, "phases-%s.jsonl" % section), "a") as f:
        for k, r in enumerate(res):
            f.write(json.dumps(dict(working_set=working_set, mix=mix, config=config, job="ab"[k],
                                    start=r.get("start"), iters=r.get("iters"))) + "\n")


def sec_pairs(S, meta):
    iters, period = knob("EVAL_PAIR_ITERS", int), dur(knob("EVAL_PAIR_PERIOD_S", float))
    tqs, gib = knob_list("EVAL_TQS"), knob("EVAL_SMALL_GIB", float)
    br = Broker(S, "pairs")
    native = [Notebook(S, "pairs-native-%s" % k, "native") for k in "ab"]
    thesis = [Notebook(S, "pairs-thesis-%s" % k, "thesis", br) for k in "ab"]
    gs = [Notebook(S, "pairs-gpushare-%s" % k, "gpushare", br) for k in "ab"]
    start_all(native + thesis + gs)
    cal = calibrate(native[0])
    for nb in native + thesis + gs:  # small working sets: all fit at once
        r = nb.call(120, op="alloc", gib=gib, check=True)
        if not r["ok"]:
            raise RuntimeError("pairs: %s cannot allocate %.2f GiB: %s" % (nb.name, gib, r["error"]))
    br.wait_released()
    rows = Table(S, "pairs.csv", PAIR_FIELDS)
    solo_timeout = 60 + 10 * iters * period
    pair_timeout = 60 + 10 * iters * period  # the thesis' 5 s idle release, then the other job

    def row(mix, config, total, res, tq=""):
        rows.add(working_set="small", gib=gib, mix=mix, config=config, tq_s=tq,
                 total_s=total, job_a_s=res[0]["seconds"] if res else "",
                 job_b_s=res[1]["seconds"] if len(res) > 1 else "", ok=1, error="",
                 iters=iters, period_s=period)
        record_phases(S, "pairs", "small", mix, config, res)
        log("pairs %s %s%s: %.2f s" % (mix, config, " tq=%s" % tq if tq else "", total))

    for mix, frac in MIXES:
        cmd = job_cmd(cal, frac, period, iters)
        solo = []

        def serial():
            solo.extend(nb.call(solo_timeout, **cmd) for nb in native)
            row(mix, "serial", solo[0]["seconds"] + solo[1]["seconds"], solo)

        # The thesis' hooks keep the GPU 5 s after their last kernel, and a
        # run must start with nobody holding it; the native runs (which do
        # not ask the broker) fill some of those pauses.
        fillers = [serial, lambda: row(mix, "native", *run_pair(native, cmd, pair_timeout))]
        for tq in tqs:
            br.wait_released()
            br.set(scheduler="on", policy="exclusive", tq=tq)
            row(mix, "exclusive", *run_pair(thesis, cmd, pair_timeout), tq=tq)
            if fillers:
                fillers.pop(0)()
        for f in fillers:
            f()
        br.wait_released()
        for policy in ("burst", "adaptive"):
            br.set(scheduler="on", policy=policy)
            row(mix, policy, *run_pair(gs, cmd, pair_timeout))
    meta.update(repetitions=1, calibration=cal, iters=iters, period_s=period, gib=gib, tqs=tqs,
                notes="jobs: ITERS x (GPU phase of bf16 %dx%d matmuls, then a pure-Python CPU "
                      "phase) in one cell; exclusive = the thesis' configuration (no cell "
                      "watcher, 5 s idle release); burst and adaptive = gpushare's (cells "
                      "watched, 200 ms idle release)" % (cal["unit_n"], cal["unit_n"]))
    shutdown(native + thesis + gs, br)


PAIR_FIELDS = ["working_set", "gib", "mix", "config", "tq_s", "total_s", "job_a_s", "job_b_s",
               "ok", "error", "iters", "period_s", "switches", "switch_s"]


def switches_between(events_path, t0, t1):
    """(switches, seconds) in the broker's event log between t0 and t1 (wall
    clock): every unpark is a switch (the pair's memory does not fit twice);
    its seconds are from the first park_start or unpark_start of the switch
    to the unpark's end, the time it kept both jobs off the GPU at worst."""
    try:
        with open(events_path) as f:
            ev = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return "", ""
    ev = [e for e in ev if t0 <= e.get("ts", 0) <= t1]
    n, secs, begin = 0, 0.0, None
    for e in ev:
        if e.get("event") in ("park_start", "unpark_start") and begin is None:
            begin = e["ts"]
        elif e.get("event") == "unpark":
            n += 1
            secs += e["ts"] - (begin if begin is not None else e["ts"] - e.get("seconds", 0))
            begin = None
    return n, round(secs, 4)


def start_ballast(S, leave_gib, slack_gib):
    """The ballast leaves leave+slack GiB free: slack for what the broker
    cannot count (contexts) so that its estimate is never above the truth."""
    free = gpu_free_gib(S)
    log("ballast: %s GiB free before" % free)
    if free is None or free < leave_gib + slack_gib + 1:
        raise RuntimeError("the GPU has %s GiB free; the ballast needs more than %.1f"
                           % (free, leave_gib + slack_gib + 1))
    p = spawn([S.py, BALLAST, str(leave_gib + slack_gib)], S.env,
              os.path.join(S.out, "ballast.log"))
    q = queue.Queue()
    threading.Thread(target=lambda: q.put(p.stdout.readline()), daemon=True).start()
    try:
        info = json.loads(q.get(timeout=120))
    except (queue.Empty, ValueError):
        raise RuntimeError("the ballast did not start (ballast.log)")
    log("ballast: holds %.2f GiB, %.2f GiB free after" % (info["held_bytes"] / GIB,
                                                         info["free_after"] / GIB))
    if info["free_after"] < (leave_gib + slack_gib * 0.5) * GIB:
        raise RuntimeError("ballast left only %.2f GiB" % (info["free_after"] / GIB))
    return p, info


def sec_bigpairs(S, meta, name="bigpairs", knobs=("EVAL_BIG_GIB", "EVAL_BIG_FREE_GIB")):
    iters, period = knob("EVAL_PAIR_ITERS", int), dur(knob("EVAL_PAIR_PERIOD_S", float))
    gib, free_gib = knob(knobs[0], float), knob(knobs[1], float)
    policies = knob("EVAL_BIG_POLICIES").split(",")
    if not (gib < free_gib < 2 * gib):
        raise SystemExit("%s: need %s < %s < 2 x %s" % (name, knobs[0], knobs[1], knobs[0]))
    slack = 0.5 if not SIM else 0.01
    # The broker counts only the memory the ballast leaves (gpu_memory);
    # idle notebooks are parked at once (park_idle_s = 0).
    # (park_host_budget: the default is half of MemTotal, which starts small
    # on the GPU machine's VM and grows as memory is used.)
    # (Two working sets may be in host memory at once during a switch.)
    budget = max(32, int(2.5 * gib + 0.999))
    br = Broker(S, name, settings={"gpu_memory": "%dM" % int(free_gib * 1024),
                                         "park_idle_s": 0, "park_host_budget": "%dG" % budget})
    native = [Notebook(S, "big-native-%s" % k, "native") for k in "ab"]
    gs = [Notebook(S, "big-gpushare-%s" % k, "gpushare", br, {"GPUSHARE_MAKE_ROOM_TIMEOUT_MS": "120000"})
          for k in "ab"]
    start_all(native + gs)
    cal = calibrate(native[0])
    # Every context exists now: the ballast measures what is left.
    ballast, binfo = start_ballast(S, free_gib, slack)
    rows = Table(S, name + ".csv", PAIR_FIELDS)
    solo_timeout = 60 + 10 * iters * period
    pair_timeout = 120 + 20 * iters * period  # switches take seconds each

    def row(mix, config, total, res, ok=1, error="", tq="", window=None):
        sw, sw_s = switches_between(br.events, *window) if window else ("", "")
        rows.add(working_set="big", gib=gib, mix=mix, config=config, tq_s=tq, total_s=total,
                 job_a_s=res[0]["seconds"] if res else "",
                 job_b_s=res[1]["seconds"] if len(res) > 1 else "", ok=ok, error=error,
                 iters=iters, period_s=period, switches=sw, switch_s=sw_s)
        record_phases(S, name, "big", mix, config, res)
        log("%s %s %s: %s" % (name, mix, config, "%.2f s" % total if ok else error))

    # Native: one at a time (serial); both at once cannot even allocate.
    for mix, frac in MIXES:
        cmd = job_cmd(cal, frac, period, iters)
        res = []
        for nb in native:
            r = nb.call(120, op="alloc", gib=gib, check=True)
            if not r["ok"]:
                raise RuntimeError("bigpairs: %s alone cannot allocate: %s" % (nb.name, r["error"]))
            res.append(nb.call(solo_timeout, **cmd))
            nb.call(60, op="free")
        row(mix, "serial", res[0]["seconds"] + res[1]["seconds"], res)
    native[0].call(120, op="alloc", gib=gib, check=True)  # fits: checked in the serial runs
    b = native[1].call(120, op="alloc", gib=gib, check=True)
    for mix, _ in MIXES:
        row(mix, "native", "", [], ok=0,
            error="cannot run: second working set does not fit (%s)" % b.get("error", "?")
            if not b["ok"] else "both fitted: the ballast left too much")
    for nb in native:
        nb.call(60, op="free")
    # gpushare: each notebook allocates in a cell of its own; the second
    # allocation parks the first notebook (idle) to make room.
    t0 = now()
    for nb in gs:
        r = nb.call(180, op="alloc", gib=gib)
        if not r["ok"]:
            raise RuntimeError("bigpairs: %s cannot allocate under gpushare: %s" % (nb.name, r["error"]))
    log("bigpairs: both allocated in %.1f s (the second through parking)" % (now() - t0))
    # The swap tier needs host memory pinned for both working sets (one is
    # parked, the other goes out at a switch); the pool pins in the
    # background and pauses while sessions move, and a switch without a
    # lease falls back to the checkpoint tier, twenty times slower.
    t0 = now()
    while now() - t0 < 120 and not SIM:
        pool = (br.status()["parking"].get("pool") or [{}])[0]
        # (both working sets, in whole chunks: what the pool aims at)
        if pool.get("pinned_bytes", 0) >= max(2 * gib * GIB, pool.get("target_bytes", 0)):
            break
        time.sleep(0.5)
    log("bigpairs: the pool pinned %s GiB in %.1f s" % (
        ((br.status()["parking"].get("pool") or [{}])[0].get("pinned_bytes", 0)) / GIB, now() - t0))
    # The park that made room for the second allocation came before the
    # pool had pinned, so it went to the checkpoint tier; the first timed
    # run would pay for its restore (3.15 s for 4 GiB on the H200).  One
    # short job on each, in turn, brings it back and leaves both on the swap
    # tier, as they are in a notebook server that has run for a while.
    warm = job_cmd(cal, 0.5, period, 1)
    for nb in gs:
        nb.call(pair_timeout, **warm)
    with open(br.events) as f:
        parks = [json.loads(line) for line in f if '"park"' in line]
    log("bigpairs: warm-up done (parks so far, by tier: %s)" % ", ".join(
        "%s %s" % (p.get("session", "?")[-1:], p.get("tier")) for p in parks
        if p.get("event") == "park"))
    for mix, frac in MIXES:
        cmd = job_cmd(cal, frac, period, iters)
        for policy in policies:
            br.set(scheduler="on", policy=policy)
            t0 = time.time()
            total, res = run_pair(gs, cmd, pair_timeout)
            row(mix, policy, total, res, tq=20 if policy == "exclusive" else "",
                window=(t0, time.time()))
    st = br.status()
    meta.update(repetitions=1, calibration=cal, iters=iters, period_s=period, gib=gib,
                gpu_memory_gib=free_gib, ballast=binfo, park_gbps=st["gpus"][0].get("park_gbps"),
                unpark_gbps=st["gpus"][0].get("unpark_gbps"),
                notes="a native ballast process held all but %.1f GiB (+%.1f GiB slack for CUDA "
                      "contexts) of the GPU; the broker counted %.1f GiB (gpu_memory); 'the GPU's "
                      "memory' for these pairs is that. exclusive is gpushare's (cells watched, "
                      "200 ms idle release, tq 20 s): the thesis' configuration cannot park"
                      % (free_gib, slack, free_gib))
    shutdown(native + gs, br)
    ballast.stdin.close()


# ---- 3. interactivity ---------------------------------------------------------------

def steps_between(marks, t0, t1):
    """A's training steps between t0 and t1, from its [time, steps] marks
    (linear between two marks)."""
    def at(t):
        for (ta, sa), (tb, sb) in zip(marks, marks[1:]):
            if ta <= t <= tb:
                return sa + (sb - sa) * (t - ta) / (tb - ta) if tb > ta else sb
        return marks[-1][1] if t > marks[-1][0] else marks[0][1]
    return at(t1) - at(t0)


def sec_interactive(S, meta):
    T = dur(knob("EVAL_INTER_S", float))
    every = dur(knob("EVAL_INTER_EVERY_S", float))
    works_ms = knob_list("EVAL_INTER_WORKS_MS")
    delay = dur(1.0)
    count = max(3, int((T - 2 * delay) / every))
    br = Broker(S, "interactive")
    pairs = {"native": [Notebook(S, "inter-native-%s" % k, "native") for k in "ab"],
             "exclusive": [Notebook(S, "inter-thesis-%s" % k, "thesis", br) for k in "ab"],
             "gpushare": [Notebook(S, "inter-gpushare-%s" % k, "gpushare", br) for k in "ab"]}
    start_all([nb for p in pairs.values() for nb in p])
    cal = calibrate(pairs["native"][1])
    works = [units(w, cal["gpu_unit_ms"]) for w in works_ms]
    for a, _ in pairs.values():  # A's model built and warmed outside the measurement
        a.call(300, op="train", seconds=dur(2))
    br.wait_released()
    cells = Table(S, "interactive_cells.csv", ["config", "work_units", "work_ms", "latency_ms"])
    train = Table(S, "interactive_train.csv", ["config", "steps", "seconds", "steps_per_s"])
    cells_cmd = dict(op="cells", count=count, every_s=every, works=works, start_delay_s=delay)
    timeout = 60 + 3 * T  # the thesis' B may wait a whole quantum (20 s)

    def record(config, res_b, res_a=None):
        cells.extend_rows(dict(config=config, work_units=u, work_ms=u * cal["gpu_unit_ms"],
                               latency_ms=ms) for u, t0, ms in res_b["cells"])
        if res_a:
            train.add(config=config, steps=res_a["steps"], seconds=res_a["end"] - res_a["start"],
                      steps_per_s=res_a["steps_per_s"])
        log("interactive %s: B's cells %s ms%s" % (
            config, ", ".join("%.0f" % c[2] for c in res_b["cells"][:6]),
            "; A %.1f steps/s" % res_a["steps_per_s"] if res_a else ""))

    na, nb_ = pairs["native"]
    alone_s = max(dur(knob("EVAL_INTER_ALONE_S", float)), 2 * every)
    record("alone", nb_.call(timeout, **cells_cmd))
    r = na.call(timeout, op="train", seconds=max(dur(8), 2 * every))
    train.add(config="alone", steps=r["steps"], seconds=r["end"] - r["start"],
              steps_per_s=r["steps_per_s"])
    for config, policy in (("native", None), ("exclusive", "exclusive"), ("burst", "burst"),
                           ("adaptive", "adaptive")):
        a, b = pairs["gpushare" if config in ("burst", "adaptive") else config]
        if policy:
            br.set(scheduler="on", policy=policy, tq=20)
        # A alone first, in the same process and configuration, with B idle:
        # the trainer's loss is against this (A's rate alone moved 46-59
        # steps/s from run to run on one H200, more than any policy's cost).
        r = a.call(timeout, op="train", seconds=alone_s)
        train.add(config="alone:" + config, steps=r["steps"], seconds=r["end"] - r["start"],
                  steps_per_s=r["steps_per_s"])
        if config == "exclusive":
            br.wait_released()  # the thesis' 5 s idle release: B must not wait for it
        a.send(op="train", seconds=T)
        b.send(**cells_cmd)
        rb, ra = b.recv(timeout), a.recv(timeout)
        record(config, rb, ra)
        if config == "exclusive":
            br.wait_released()
    # The trainer's loss, in one run of A: B's cells come in windows of W s
    # with windows of W s without them around each, so that A's rate with B
    # is compared with its rate just before and after, in the same process
    # (A's rate alone drifted more from run to run than B costs it).
    W, K = dur(knob("EVAL_INTER_WINDOW_S", float)), knob("EVAL_INTER_WINDOWS", int)
    wins = Table(S, "interactive_windows.csv", ["config", "window", "with_b", "start", "end",
                                                "steps", "steps_per_s", "b_cells", "b_work_ms"])
    for config in ("native", "adaptive"):
        a, b = pairs["gpushare" if config == "adaptive" else "native"]
        if config == "adaptive":
            br.set(scheduler="on", policy="adaptive", tq=20)
        t_start = now() + delay
        edges = [t_start + k * W for k in range(2 * K + 2)]
        a.send(op="train", seconds=(2 * K + 1) * W + delay, marks=True)
        b.send(op="cells", every_s=every, works=works,
               windows=[[edges[2 * k + 1], edges[2 * k + 2]] for k in range(K)])
        rb, ra = b.recv(timeout + 4 * K * W), a.recv(timeout + 4 * K * W)
        for k in range(2 * K + 1):
            w0, w1 = edges[k], edges[k + 1]
            steps = steps_between(ra["marks"], w0, w1)
            mine = [c for c in rb["cells"] if w0 <= c[1] < w1]
            wins.add(config=config, window=k, with_b=k % 2, start=w0, end=w1, steps=steps,
                     steps_per_s=steps / (w1 - w0), b_cells=len(mine),
                     b_work_ms=sum(c[0] for c in mine) * cal["gpu_unit_ms"])
        log("interactive windows %s: A %s steps/s" % (config, ", ".join(
            "%.1f%s" % (r["steps_per_s"], "*" if r["with_b"] else "") for r in wins
            if r["config"] == config)))
    meta.update(repetitions=1, calibration=cal, seconds=T, every_s=every, works_ms=works_ms,
                cells_per_run=count, window_s=W, windows=K,
                notes="A: ResNet-50 training (batch 64, bf16) in one cell, loss read every 10 "
                      "steps; B: a cell of bf16 matmuls every %.1f s; exclusive = the thesis' "
                      "configuration (tq 20 s, 5 s idle release, no cell watcher)" % every)
    shutdown([nb for p in pairs.values() for nb in p], br)


# ---- 4. idle reclaim ------------------------------------------------------------------

def sec_reclaim(S, meta):
    reps = knob("EVAL_RECLAIM_REPS", int)
    big, free_gib = knob("EVAL_BIG_GIB", float), knob("EVAL_BIG_FREE_GIB", float)
    slack = 0.5 if not SIM else 0.01
    br = Broker(S, "reclaim", settings={"gpu_memory": "%dM" % int(free_gib * 1024),
                                        "park_idle_s": 0, "park_host_budget": "32G"})
    nbs = {"native": [Notebook(S, "rec-native-%s" % k, "native") for k in "ab"],
           "thesis": [Notebook(S, "rec-thesis-%s" % k, "thesis", br) for k in "ab"],
           "gpushare": [Notebook(S, "rec-gpushare-%s" % k, "gpushare", br) for k in "ab"],
           "plain": [Notebook(S, "rec-plain-%s" % k, "plain", br) for k in "ab"]}
    start_all([nb for p in nbs.values() for nb in p])
    cal = calibrate(nbs["native"][0])
    br.wait_released()
    rows = Table(S, "reclaim.csv", ["config", "rep", "handoff_ms", "waiter_wait_ms", "holder_work_ms"])
    # (config, processes, policy, holder's GPU work in ms, repetitions)
    configs = [("native", "native", None, 500, reps),
               ("thesis_exclusive", "thesis", "exclusive", 500, max(2, reps // 2)),
               ("gpushare_exclusive", "gpushare", "exclusive", 500, reps),
               # new cells with boost left share the GPU under adaptive (issue 17): the
               # waiter does not wait for the holder's cell (a negative handoff, as
               # natively); its wait is what this measures
               ("gpushare_adaptive", "gpushare", "adaptive", 300, reps),
               ("hook_idle_release", "plain", "exclusive", 500, reps)]
    for config, procs, policy, work_ms, n in configs:
        if policy:
            br.set(scheduler="on", policy=policy, tq=20)
        pair = nbs[procs]
        for rep in range(n):
            # Roles alternate: the last waiter (which may still hold the GPU,
            # as the thesis' hooks do for 5 s) holds next.
            h, w = pair[rep % 2], pair[1 - rep % 2]
            h.send(op="hold", units=units(work_ms, cal["gpu_unit_ms"]))
            h.recv(60)  # "started": the holder has the GPU
            w.send(op="probe")
            he, wr = h.recv(60), w.recv(60)
            rows.add(config=config, rep=rep, handoff_ms=(wr["ran"] - he["end"]) * 1000,
                     waiter_wait_ms=(wr["ran"] - wr["start"]) * 1000, holder_work_ms=work_ms)
            if policy and procs != "thesis":
                # The waiter's grant is being taken back (its cell ended):
                # a cell starting now could still run on it.
                br.wait_released()
        log("reclaim %s: handoff %s ms" % (config, ", ".join("%.1f" % r["handoff_ms"] for r in rows[-n:])))
        if policy:
            br.wait_released()

    # Memory an idle notebook keeps: one notebook allocates BIG GiB and goes
    # idle; then the other needs BIG GiB of the FREE GiB the ballast leaves.
    ballast, binfo = start_ballast(S, free_gib, slack)
    mem_rows = Table(S, "reclaim_memory.csv",
                     ["config", "working_set_gib", "idle_allocator_mib", "idle_gpu_mib_before",
                      "idle_gpu_mib_after", "idle_resident_mib", "idle_parked_mib", "idle_state",
                      "other_ok", "other_alloc_s", "other_error"])
    for config, procs, policy in (("native", "native", None),
                                  ("thesis_exclusive", "thesis", "exclusive"),
                                  ("gpushare", "gpushare", "adaptive")):
        if policy:
            br.set(scheduler="on", policy=policy)
        idle, other = nbs[procs]
        r = idle.call(120, op="alloc", gib=big, check=(procs == "native"))
        if not r["ok"]:
            raise RuntimeError("reclaim: %s cannot allocate: %s" % (idle.name, r["error"]))
        # nvidia-smi lists a process only while it has a context: after a
        # park it is gone (0 MiB), provided it was listed before.
        seen = pid_memory_mib()
        before = seen.get(idle.pid, "") if seen else ""
        own = idle.call(30, op="mem")["reserved_bytes"] / 2**20  # the allocator's view
        t0 = now()
        r = other.call(180, op="alloc", gib=big, check=(procs == "native"))
        t1 = now()
        seen = pid_memory_mib()
        after = seen.get(idle.pid, 0.0) if seen is not None and before != "" else ""
        sess = {}
        if policy:
            for s in br.status()["gpus"][0]["sessions"]:
                if idle.pid in s.get("pids", []):
                    sess = s
        mem_rows.add(config=config, idle_gpu_mib_before=before, idle_gpu_mib_after=after,
                     idle_allocator_mib=own,
                     idle_resident_mib=sess.get("resident_bytes", 0) / 2**20 if sess else "",
                     idle_parked_mib=sess.get("parked_bytes", 0) / 2**20 if sess else "",
                     idle_state=sess.get("state", "") if sess else "idle (not seen)",
                     other_ok=int(r["ok"]), other_alloc_s=t1 - t0,
                     other_error=r.get("error", ""), working_set_gib=big)
        log("reclaim memory %s: %s" % (config, mem_rows[-1]))
        if r["ok"]:
            other.call(120, op="free")
        if not r["ok"] or procs != "gpushare":
            idle.call(120, op="free")  # (a parked one stays parked until the broker's exit)
        if policy:
            br.wait_released()
    meta.update(repetitions=reps, thesis_repetitions=max(2, reps // 2), calibration=cal,
                gpu_memory_gib=free_gib, ballast=binfo,
                notes="handoff = the waiter's first kernel done (sync returned) minus the "
                      "holder's last instruction in its cell, both CLOCK_MONOTONIC; memory: "
                      "the broker with park_idle_s = 0 and gpu_memory = the ballast's leftover")
    shutdown([nb for p in nbs.values() for nb in p], br)
    ballast.stdin.close()


# ---- 5. scale ---------------------------------------------------------------------------

def scale_run(S, nbs, n, D, gap, cal, br, rows, cell_rows, config):
    """One window of n mostly idle notebooks (the first n of nbs): a row
    of scale.csv and its cells."""
    busy = GpuBusy(S)
    busy.start()
    c0, t0 = br.cpu_s(), now()
    for i, nb in enumerate(nbs[:n]):
        nb.send(op="random_cells", seconds=D, mean_gap_s=gap, seed=1000 * n + i,
                min_units=units(20, cal["gpu_unit_ms"]), max_units=units(400, cal["gpu_unit_ms"]))
    res = [nb.recv(120 + 4 * D) for nb in nbs[:n]]
    wall = now() - t0
    cpu = br.cpu_s() - c0 if config == "gpushare" else 0.0
    util = busy.stop()
    lat = []
    offered = 0.0
    for i, r in enumerate(res):
        for u, ts, ms in r["cells"]:
            solo = u * cal["gpu_unit_ms"]
            offered += solo
            lat.append(ms / solo)
            cell_rows.append(dict(config=config, n=n, notebook=i, work_ms=solo, latency_ms=ms,
                                  slowdown=ms / solo))
    cell_rows.extend_rows([])
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else ""
    rows.add(config=config, n=n, seconds=wall, cells=len(lat), gpu_util_pct=util,
             offered_load_pct=100 * offered / 1000 / wall, slowdown_p50=q(0.5),
             slowdown_p99=q(0.99), broker_cpu_s=cpu, broker_cpu_pct=100 * cpu / wall)
    log("scale n=%d %s: %s" % (n, config, rows[-1]))


def sec_scale(S, meta):
    ns = knob_list("EVAL_SCALE_NS", int)
    D = dur(knob("EVAL_SCALE_S", float))
    gap = dur(knob("EVAL_SCALE_GAP_S", float))
    native = knob("EVAL_SCALE_NATIVE") == "1"
    boosts = [int(b) for b in knob("EVAL_SCALE_BOOSTS").split(",") if b.strip() not in ("", "-")]
    longer = {}
    for item in knob("EVAL_SCALE_LONG").split(","):
        if item.strip() and item.strip() != "-":
            k, _, v = item.partition("=")
            longer[int(k)] = dur(float(v))
    br = Broker(S, "scale")
    default_boost = int(round(br.status()["config"]["boost_ms"]))
    nbs, nat = [], []
    rows = Table(S, "scale.csv", ["config", "n", "seconds", "cells", "gpu_util_pct",
                                  "offered_load_pct", "slowdown_p50", "slowdown_p99",
                                  "broker_cpu_s", "broker_cpu_pct"])
    cell_rows = Table(S, "scale_cells.csv", ["config", "n", "notebook", "work_ms", "latency_ms",
                                             "slowdown"])
    cal = None
    for n in ns:
        new = [Notebook(S, "scale-%02d" % (len(nbs) + i), "gpushare", br) for i in range(n - len(nbs))]
        newn = [Notebook(S, "scale-native-%02d" % (len(nat) + i), "native")
                for i in range(n - len(nat))] if native else []
        start_all(new + newn)
        nbs += new
        nat += newn
        if cal is None:
            cal = calibrate(nbs[0])
        br.wait_released()
        Dn = longer.get(n, D)
        scale_run(S, nbs, n, Dn, gap, cal, br, rows, cell_rows, "gpushare")
        # The two-level queue with a shorter first level (issue 38: the
        # model's 3.01 x at 100 ms against 3.42 x for time slicing), the
        # same cells in the same run.
        for b in (boosts if n in longer else []):
            br.set(boost_ms=b)
            br.wait_released()
            scale_run(S, nbs, n, Dn, gap, cal, br, rows, cell_rows, "gpushare_boost%d" % b)
            br.set(boost_ms=default_boost)
        if native:  # the same cells (same seeds), the driver's own time slicing
            scale_run(S, nat, n, Dn, gap, cal, br, rows, cell_rows, "native")
    meta.update(repetitions=1, calibration=cal, seconds_per_n=D, mean_gap_s=gap, ns=ns,
                longer={str(k): v for k, v in longer.items()},
                native=native, boosts=boosts, default_boost_ms=default_boost,
                notes="notebooks through gpushare-launch under the adaptive policy; each cell "
                      "does 20 to 400 ms of bf16 matmuls (log-uniform), pauses exponential; "
                      "slowdown = cell latency / the same work alone; utilisation from "
                      "nvidia-smi every 200 ms; config native: the same notebooks and seeds "
                      "without gpushare, after each N")
    shutdown(nbs + nat, br)


def sec_bigpairs32(S, meta):
    sec_bigpairs(S, meta, "bigpairs32", ("EVAL_BIG32_GIB", "EVAL_BIG32_FREE_GIB"))


# ---- 6. capacity and moves (issue 38) --------------------------------------------------

GPU_DIR = os.path.join(ROOT, "tests", "gpu")


def carry_for(S, top):
    """The directory the tests/gpu scripts take as CARRY_DIR: .carry on the
    GPU machine; on the simulated GPU, links into the build tree."""
    if not SIM:
        return os.environ.get("EVAL_CARRY", os.path.join(ROOT, ".carry"))
    carry = os.path.join(top, "carry")
    os.makedirs(os.path.join(carry, "gpushare"), exist_ok=True)
    os.makedirs(os.path.join(carry, "lib"), exist_ok=True)
    cell_driver = os.path.join(os.path.dirname(os.path.dirname(S.broker)), "bench", "cell_driver")
    for path in (S.broker, S.hook, cell_driver):
        link = os.path.join(carry, "gpushare", os.path.basename(path))
        if not os.path.lexists(link):
            os.symlink(path, link)
    return carry


def run_gpu_script(S, argv, env, out_dir, timeout):
    """A tests/gpu script, its JSON lines on stdout kept in out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    p = spawn([S.py] + argv, env, os.path.join(out_dir, "stderr.log"), stdin=subprocess.DEVNULL)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s did not finish in %d s" % (os.path.basename(argv[0]), timeout))
    with open(os.path.join(out_dir, "stdout.jsonl"), "w") as f:
        f.write(out)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if p.returncode != 0:
        raise RuntimeError("%s failed (rc %d, see %s)" % (os.path.basename(argv[0]), p.returncode,
                                                         out_dir))
    return lines


def sec_capacity(S, meta):
    """More notebooks than the GPU holds, taking turns, then more than fit
    at once, under the broker's default settings: every cell bit-exact,
    nobody killed (tests/gpu/pressure.py, the issue-33 bench)."""
    top = os.path.join(S.out, "capacity")
    deadline = knob("EVAL_PRESSURE_DEADLINE_S", float)
    env = dict(S.env, PRESSURE_CONFIGS=knob("EVAL_PRESSURE_CONFIGS"),
               PRESSURE_DEADLINE_S="%d" % deadline,
               PRESSURE_ENDPOINT="ipc://%s/pressure.sock" % S.tmp)
    if SIM:  # the smoke run's sizes: a 64 MiB card, a 96 MiB host
        env.update(PRESSURE_BACKEND="sim", GPUSHARE_SIM_MEMORY="64M",
                   GPUSHARE_SIM_HOST_MEMORY="96M", GPUSHARE_POOL_CHUNK="4M",
                   GPUSHARE_SWAP_SEGMENT="2M", GPUSHARE_SIM_CONCURRENCY="4",
                   PRESSURE_CELL_TIMEOUT_S="40", PYTHONPATH=os.path.join(ROOT, "tests", "simcuda"))
    lines = run_gpu_script(S, [os.path.join(GPU_DIR, "pressure.py"), carry_for(S, top),
                               os.path.join(top, "out")], env, top, deadline + 60)
    rows = Table(S, "capacity.csv", ["config", "phase", "notebook", "tier", "round", "wall_s",
                                     "waited_s", "bit_exact", "ok", "error"])
    rows.extend_rows([x for x in lines if x.get("event") == "cell"])
    summaries = [x for x in lines if x.get("event") == "summary"]
    if not summaries:
        raise RuntimeError("pressure.py wrote no summary (see %s)" % top)
    meta.update(repetitions=1, summaries=summaries,
                cells=sum(x.get("cells", 0) for x in summaries),
                cells_ok=sum(x.get("cells_ok", 0) for x in summaries),
                deaths=sum(x.get("deaths", 0) for x in summaries),
                notes="tests/gpu/pressure.py with the broker's default settings (park_idle_s=0); "
                      "fit: N notebooks GPU + host hold, in turn; over: one more, all at once")
    log("capacity: %d of %d cells ok, %d deaths" % (meta["cells_ok"], meta["cells"],
                                                    meta["deaths"]))


def sec_park(S, meta):
    """Whole parks and unparks of 32 GiB notebooks, and switches between
    60 GB ones, on the swap tier with the default host budget
    (tests/gpu/park_rotation.py, every cell checked bit-exact)."""
    if SIM:
        raise RuntimeError("park: times on the simulated GPU mean nothing; a real GPU only")
    rows = Table(S, "park.csv", ["gib", "kind", "session", "tier", "bytes", "seconds",
                                 "switch_s", "bit_exact"])
    carry = carry_for(S, S.out)
    # A park or a switch happens only when the notebooks do not fit together
    # (on the H100 two of 32 GiB did, and park_rotation.py waited for a park
    # that never came until its timeout): as many notebooks as it takes to
    # exceed the free memory (on the H100 three of 32 GiB and two of 60 GB,
    # on the H200 five and three), or refused at once with the reason.
    free = gpu_free_gib(S)
    runs = []
    for knob_name, least, rounds, kind in (("EVAL_PARK_GIB", 3, 1, "park"),
                                           ("EVAL_SWITCH_GIB", 2, 2, "switch")):
        gib = knob(knob_name, float)
        n = least if free is None else max(least, int(free // gib) + 1)
        if n > 5:
            raise RuntimeError("park: %d notebooks of %s=%g GiB fit together in the %.1f GiB free "
                               "on this GPU: nothing would %s among five; use more than a fifth"
                               % (n - 1, knob_name, gib, free, kind))
        meta["%s_notebooks" % kind] = n
        runs.append((gib, n, rounds, kind))
    for gib, n, rounds, kind in runs:
        d = os.path.join(S.out, "%s-%g" % (kind, gib))
        env = dict(S.env, PARK_SWAP="1", PARK_N=str(n), PARK_HOST_BUDGET="auto")
        lines = run_gpu_script(S, [os.path.join(GPU_DIR, "park_rotation.py"), carry, d,
                                   "%g" % gib, str(rounds)], env, d, 280)
        exact = all(x["bit_exact"] for x in lines if x.get("bit_exact") is not None)
        with open(os.path.join(d, "park-events.jsonl")) as f:
            ev = [json.loads(x) for x in f if x.strip()]
        for e in ev:
            if e.get("event") in ("park", "unpark"):
                rows.add(gib=gib, kind=e["event"], session=e.get("session"), tier=e.get("tier"),
                         bytes=e.get("bytes"), seconds=e.get("seconds"), bit_exact=int(exact))
        sw = subprocess.run([S.py, os.path.join(ROOT, "bench", "switch_times.py"),
                             os.path.join(d, "park-events.jsonl")], capture_output=True,
                            text=True, timeout=60)
        for x in (json.loads(l) for l in sw.stdout.splitlines() if l.strip()):
            rows.add(gib=gib, kind="switch", session=x["session"], tier=x["tier"],
                     bytes=x["bytes"], seconds=x["unpark_s"], switch_s=x["switch_s"],
                     bit_exact=int(exact))
        if not exact:
            raise RuntimeError("park: a %g GiB notebook's data did not come back bit-exact" % gib)
    meta.update(repetitions=1, notes="tests/gpu/park_rotation.py, PARK_SWAP=1, "
                "park_host_budget auto; park and unpark seconds from the broker's event log, "
                "switches by bench/switch_times.py")


SECTIONS = {"cost": sec_cost, "pairs": sec_pairs, "bigpairs": sec_bigpairs,
            "bigpairs32": sec_bigpairs32, "capacity": sec_capacity, "park": sec_park,
            "interactive": sec_interactive, "reclaim": sec_reclaim, "scale": sec_scale}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("EVAL_RESULTS", "/tmp/gs-eval"))
    ap.add_argument("--command", default=None, help="the command line to record in meta files")
    ap.add_argument("--commit", default=None,
                    help="the gpushare commit, kept in each section's meta (run.sh passes it)")
    ap.add_argument("sections", nargs="*", default=list(SECTIONS))
    args = ap.parse_args()
    for s in args.sections:
        if s not in SECTIONS:
            raise SystemExit("eval.py: no section %r (%s)" % (s, " ".join(SECTIONS)))
    os.makedirs(args.out, exist_ok=True)
    global _pidfile
    _pidfile = os.path.join(args.out, ".children")
    # SIGTERM (timeout) becomes an exception, so every child is ended.
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    S = Setup(args.out)
    rc = 0
    try:
        for name in args.sections:
            meta = dict(section=name, backend="sim" if SIM else "torch",
                        gpushare=args.commit,
                        command=args.command or " ".join(["python3"] + sys.argv),
                        knobs={k[0]: os.environ.get(k[0], k[2] if SIM else k[1]) for k in KNOBS},
                        started_unix=time.time())
            t0 = now()
            log("== %s" % name)
            for stale in ("events-%s.jsonl" % name, "broker-%s.log" % name):  # a rerun's
                if os.path.exists(os.path.join(args.out, stale)):
                    os.unlink(os.path.join(args.out, stale))
            try:
                SECTIONS[name](S, meta)
                meta["ok"] = True
            except (RuntimeError, AssertionError, OSError, subprocess.SubprocessError) as e:
                log("section %s failed: %s" % (name, e))
                meta.update(ok=False, error=str(e))
                rc = 1
            except KeyboardInterrupt:
                meta.update(ok=False, error="stopped (timeout or signal) after %.0f s; the CSV "
                            "files hold what was measured until then" % (now() - t0))
                raise
            finally:
                end_children()
                meta["wall_s"] = now() - t0
                with open(os.path.join(args.out, "meta-%s.json" % name), "w") as f:
                    json.dump(meta, f, indent=1)
                log("== %s: %.1f s" % (name, meta["wall_s"]))
    except KeyboardInterrupt:
        log("interrupted")
        rc = 130
    finally:
        end_children()
        S.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
