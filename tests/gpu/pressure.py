"""The memory-pressure bench (issue 33): notebooks that together need more
than the GPU take turns under gpushare with the broker's DEFAULT settings
(only park_idle_s=0, so that turns are quick), on both tiers side by side
(the swap tier, the hooks' default, and the checkpoint tier,
GPUSHARE_SWAP=off), sized from the card and the host:

  fit   N notebooks of S bytes that GPU + host hold together (two or more
        parked at once where the host allows): each allocates its data (a
        seeded pattern), then runs ROUNDS cells in turn, each allocating a
        scratch tensor on top and checking its data bit-exact at the same
        address.  Expected: every cell bit-exact, nothing dies.
  over  more notebooks than fit, all at once (a thread each): alloc,
        ROUNDS cells, close.  Expected: cells that find no room wait (and
        say so: the hook's waits), nothing dies, all finish as the others
        close.  An allocation that failed is tried again when a notebook
        closes.

Config "disk" (issue 37, the disk tier): more notebooks than the GPU and
the host's budget hold, taking turns (phase fit, the swap tier only: what
goes to disk comes from the pool).  Notebooks of PRESSURE_DISK_GIB (8; 8
MiB on the simulated GPU); a native ballast process
(bench/eval/ballast.py) holds the rest of the card but room for two of
them and every notebook's context, the broker counts that room
(gpu_memory) and room for two in host memory (park_host_budget), and has a
park_disk_dir of its own (a new 0700 directory under PRESSURE_DISK_DIR,
default the temporary directory, removed after): PRESSURE_DISK_EXTRA (2)
notebooks more than GPU + host hold must go to disk under the host
budget's pressure and come back bit-exact.  Budgets are settings here so
that the run fits the GPU machine's small disk and its time; the config
is skipped, saying why, when the disk has no room for its images.  Its
summary adds the tier moves of the broker's event log and the images left
in the directory (0 expected).

Sizes (the machine's; overrides below): G the GPU's memory, H the host's
room for parked memory, min(MemAvailable, MemTotal / 2) (the broker's
default park_host_budget is half the RAM; on the simulated GPU the
simulated host, GPUSHARE_SIM_HOST_MEMORY, plays the RAM).  Config "many":
S = min(0.3 G, H / 2) (24 GiB on an 80 GB card with 128 GiB of RAM: 5
notebooks); "big": S = 0.5 G (40 GiB: 2 notebooks).  N = the notebooks of S
the GPU holds beside one cell's scratch, plus those H holds.  The "over"
phase runs N + PRESSURE_OVER_EXTRA (1).

    pressure.py CARRY_DIR OUT_DIR

Environment: PRESSURE_CONFIGS ("many big", or "NxGIB" items such as
"5x24"), PRESSURE_N and PRESSURE_GIB (one config of their own),
PRESSURE_TIERS ("swap checkpoint": notebooks take them in turn),
PRESSURE_SCRATCH_GIB (1; 1/32 of the card on the simulated GPU),
PRESSURE_ROUNDS (1), PRESSURE_PHASES ("fit over"), PRESSURE_OVER_EXTRA (1),
PRESSURE_DEADLINE_S (the whole run, 420: everything it started is stopped
by then and the summary written), PRESSURE_CELL_TIMEOUT_S (150),
PRESSURE_PARK_IDLE_S (0), PRESSURE_BACKEND ("sim": the simulated GPU, the
workers use gpusim.py), PRESSURE_ENDPOINT.

Writes JSON lines to stdout and OUT/pressure.jsonl: one per cell (config,
phase, notebook, tier, round, wall_s, waited_s, bit_exact, ok, error), a
death line per notebook that died, and one summary per config (cells,
cells_ok, deaths, the dmesg lines about OOM kills and NVRM that appeared
during the run, MemAvailable's minimum; on the simulated GPU its host
memory's peak and OOM kills); MemAvailable sampled over the run in
OUT/pressure-host.jsonl; the broker's log, event log and final status, and
each notebook's stderr, in OUT."""
import json
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench_procs import (CellDriver, gpu_total_bytes, meminfo, parse_size, readline, spawn,
                         start_broker, stop_broker)

HERE = os.path.dirname(os.path.abspath(__file__))
BALLAST = os.path.join(HERE, "..", "..", "bench", "eval", "ballast.py")
GIB, MIB = 1 << 30, 1 << 20


def knob(name, default):
    v = os.environ.get(name, "")
    return v if v.strip() else default


SIM = knob("PRESSURE_BACKEND", "") == "sim"
EP = knob("PRESSURE_ENDPOINT", "ipc:///tmp/gs/pressure.sock")
START = time.time()
DEADLINE = START + float(knob("PRESSURE_DEADLINE_S", "420"))
CELL_TIMEOUT = float(knob("PRESSURE_CELL_TIMEOUT_S", "150"))
ROUNDS = int(knob("PRESSURE_ROUNDS", "1"))
TIERS = knob("PRESSURE_TIERS", "swap checkpoint").split()
PHASES = knob("PRESSURE_PHASES", "fit over").split()
OVER_EXTRA = int(knob("PRESSURE_OVER_EXTRA", "1"))
PARK_IDLE_S = knob("PRESSURE_PARK_IDLE_S", "0")
DMESG_RE = re.compile(r"out of memory|killed process|NVRM", re.I)


class Run:
    """Where the lines go, and what is counted for the summary."""

    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()
        self.file = open(os.path.join(out, "pressure.jsonl"), "a")

    def emit(self, **kw):
        kw.setdefault("t", round(time.time() - START, 3))
        line = json.dumps(kw)
        with self.lock:
            print(line, flush=True)
            self.file.write(line + "\n")
            self.file.flush()


# ---- the machine --------------------------------------------------------

def sim_host_stats():
    try:
        import gpusim
        return gpusim.host_stats()
    except (ImportError, OSError, ValueError, AttributeError):
        return None


def machine():
    mem = meminfo()
    m = {"backend": "sim" if SIM else "gpu", "mem_total": mem.get("MemTotal", 0),
         "mem_available": mem.get("MemAvailable", 0)}
    if SIM:
        m["gpu_bytes"] = parse_size(knob("GPUSHARE_SIM_MEMORY", "16G"))
        host = knob("GPUSHARE_SIM_HOST_MEMORY", "")
        m["sim_host_bytes"] = parse_size(host) if host else None
        ram = m["sim_host_bytes"] or m["mem_total"]
        m["host_room"] = ram // 2
        m["unit"], m["context_bytes"], m["check_bytes"] = 2 * MIB, 0, 0
    else:
        m["gpu_bytes"] = gpu_total_bytes()
        m["host_room"] = min(m["mem_available"], m["mem_total"] // 2)
        # a PyTorch process' CUDA context (616 MiB on the H200), and the
        # pattern chunk a check regenerates
        m["unit"], m["context_bytes"], m["check_bytes"] = GIB, 640 * MIB, 256 * MIB
    scratch = knob("PRESSURE_SCRATCH_GIB", "")
    m["scratch_bytes"] = int(float(scratch) * GIB) if scratch else \
        (m["gpu_bytes"] // 32 // (2 * MIB) * 2 * MIB if SIM else GIB)
    return m


def capacity(m, size):
    """(notebooks of `size` the GPU holds beside one cell's scratch, those
    the host's room holds)."""
    usable = m["gpu_bytes"] * 0.98 - m["scratch_bytes"] - m["check_bytes"]
    return max(1, int(usable // (size + m["context_bytes"]))), int(m["host_room"] // size)


class Spec:
    """One configuration to run: its notebooks, their size, and what the
    disk config adds (broker settings, tiers, phases, how many fit where)."""

    def __init__(self, name, n, nbytes, m):
        self.name, self.n, self.nbytes = name, n, nbytes
        self.gpu_fits, self.host_fits = capacity(m, nbytes)
        self.disk_fits = 0
        self.settings, self.tiers, self.phases = [], TIERS, PHASES
        self.disk_dir = None
        self.ballast_leave = 0  # bytes a ballast leaves free on the card (0: none)
        self.skip = None  # why it cannot run here


def disk_spec(m):
    """The disk config (module docstring): budgets for two notebooks on
    the GPU and two in host memory, PRESSURE_DISK_EXTRA more on disk."""
    size = int(float(knob("PRESSURE_DISK_GIB", "8" if not SIM else "0.0078125")) * GIB)
    extra = int(knob("PRESSURE_DISK_EXTRA", "2"))
    spec = Spec("disk", 4 + extra, size, m)
    spec.gpu_fits, spec.host_fits, spec.disk_fits = 2, 2, extra
    spec.tiers, spec.phases = ["swap"], ["fit"]  # the checkpoint tier has no disk tier
    # room for two and a quarter: two fit, a third does not
    gpu = 2 * (size + m["context_bytes"]) + m["scratch_bytes"] + m["check_bytes"] + size // 4
    spec.settings = ["gpu_memory=%d" % gpu, "park_host_budget=%d" % (2 * size + size // 2)]
    # what the broker counts, every notebook's context, and slack for what
    # it cannot count (as the evaluation's big pairs leave)
    spec.ballast_leave = gpu + spec.n * m["context_bytes"] + (GIB // 2 if not SIM else 2 * MIB)
    parent = knob("PRESSURE_DISK_DIR", "") or tempfile.gettempdir()
    st = os.statvfs(parent)
    free = st.f_bavail * st.f_frsize
    need = extra * size + 2 * GIB // (1 if not SIM else 1024)
    if free < need:
        spec.skip = "the disk under %s has %.1f GiB free, the config needs %.1f GiB" % (
            parent, free / GIB, need / GIB)
        return spec
    spec.disk_dir = tempfile.mkdtemp(prefix="gs-pressure-disk-", dir=parent)  # mode 0700
    spec.settings.append("park_disk_dir=" + spec.disk_dir)
    return spec


def configs(m):
    """[Spec]."""
    if knob("PRESSURE_N", "") or knob("PRESSURE_GIB", ""):
        size = int(float(knob("PRESSURE_GIB", "24")) * GIB)
        n = int(knob("PRESSURE_N", "0")) or sum(capacity(m, size))
        return [Spec("%dx%s" % (n, knob("PRESSURE_GIB", "24")), n, size, m)]
    out = []
    for c in knob("PRESSURE_CONFIGS", "many big").split():
        if c == "disk":
            out.append(disk_spec(m))
            continue
        if "x" in c:
            n, g = c.split("x")
            out.append(Spec(c, int(n), int(float(g) * GIB), m))
            continue
        g = m["gpu_bytes"]
        raw = min(0.3 * g, m["host_room"] / 2) if c == "many" else 0.5 * g
        size = max(m["unit"], int(round(raw / m["unit"])) * m["unit"])
        spec = Spec(c, 0, size, m)
        spec.n = max(2, spec.gpu_fits + spec.host_fits)  # two at least: they share
        out.append(spec)
    return out


# ---- observing the host -------------------------------------------------

def dmesg_lines():
    """The kernel's lines about OOM kills and the NVIDIA driver (root, or
    sudo without a password; [] where neither can read the log)."""
    for cmd in (["dmesg"], ["sudo", "-n", "dmesg"]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return [line for line in r.stdout.splitlines() if DMESG_RE.search(line)]
    return None


class Sampler(threading.Thread):
    """MemAvailable (and the simulated host's use) every `every` seconds,
    into OUT/pressure-host.jsonl; keeps the extremes."""

    def __init__(self, out, every):
        super().__init__(daemon=True)
        self.f = open(os.path.join(out, "pressure-host.jsonl"), "a")
        self.every, self.stop = every, threading.Event()
        self.min_available, self.sim_peak = None, 0
        self.lock = threading.Lock()

    def sample(self):
        with self.lock:
            self._sample()

    def _sample(self):
        mem = meminfo()
        row = {"t": round(time.time() - START, 3), "mem_available": mem.get("MemAvailable")}
        st = sim_host_stats() if SIM else None
        if st:
            row["sim_host_used"] = st["used"]
            self.sim_peak = max(self.sim_peak, st["used"])
        if row["mem_available"] is not None:
            self.min_available = min(self.min_available or row["mem_available"],
                                     row["mem_available"])
        self.f.write(json.dumps(row) + "\n")
        self.f.flush()

    def run(self):
        while True:
            self.sample()
            if self.stop.wait(self.every):
                return


# ---- notebooks ----------------------------------------------------------

class Notebook:
    """A worker process (pressure_worker.py) under the hook, registered as
    a notebook session whose cells the cell driver announces."""

    def __init__(self, ctx, name, tier, nbytes, seed):
        self.ctx, self.name, self.tier = ctx, name, tier
        env = dict(ctx.env, LD_PRELOAD=os.path.join(ctx.carry, "gpushare", "libgpushare-hook.so"),
                   GPUSHARE_SESSION=name, GPUSHARE_BROKER=EP)
        env.pop("GPUSHARE_SWAP", None)  # the hook's default: the swap tier
        if tier == "checkpoint":
            env["GPUSHARE_SWAP"] = "off"
        ctx.driver.drive("register " + name)
        self.proc = spawn([sys.executable, os.path.join(HERE, "pressure_worker.py"), str(nbytes),
                           str(seed)], env,
                          stderr=open(os.path.join(ctx.out, "pressure-%s.log" % name), "w"))
        self.dead = self.closing = False

    def cell(self, phase, rnd, cmd):
        """Runs one cell; returns its row (also emitted)."""
        row = {"event": "cell", "config": self.ctx.config, "phase": phase, "notebook": self.name,
               "tier": self.tier, "round": rnd, "cmd": cmd.split()[0], "ok": False,
               "bit_exact": None, "error": None}
        t0 = time.time()
        self.ctx.driver.drive("busy " + self.name)
        limit = min(CELL_TIMEOUT, DEADLINE - time.time())
        try:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
            row.update(json.loads(readline(self.proc, limit)))
        except TimeoutError:
            # waited too long: counted as stuck (not as a death; cut short
            # by the run's deadline: neither), and stopped, so that it
            # holds nothing and answers nothing late
            if limit < CELL_TIMEOUT:
                row["error"] = "deadline: the run's time was up after %.0f s" % limit
            else:
                row["error"] = "timeout: no answer within %.0f s" % CELL_TIMEOUT
                self.ctx.stuck.add(self.name)
            self.dead = True
            self.proc.kill()
        except (EOFError, OSError, ValueError) as e:
            row["error"] = "died: %s" % e
            self.death()
        finally:
            self.ctx.driver.drive("idle " + self.name)
        row["wall_s"] = round(time.time() - t0, 3)
        row.setdefault("waited_s", None)
        self.ctx.count(row)
        self.ctx.run.emit(**row)
        return row

    def death(self):
        if self.dead:
            return
        self.dead = True
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        rc = self.proc.returncode
        self.ctx.deaths.append(self.name)
        self.ctx.run.emit(event="death", config=self.ctx.config, notebook=self.name,
                          tier=self.tier, returncode=rc,
                          signal=signal.Signals(-rc).name if rc is not None and rc < 0 else None)

    def close(self):
        """quit; a notebook that does not go within 30 s is killed (and
        counted as stuck, not as a death)."""
        if self.dead:
            return
        self.closing = True
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        except OSError:
            pass
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.ctx.stuck.add(self.name)
            self.proc.kill()
            self.proc.wait()
            return
        if rc != 0:
            self.death()


class Config:
    """One configuration: its broker, cell driver, notebooks and counts."""

    def __init__(self, run, carry, spec, env):
        name = spec.name
        self.run, self.carry, self.config, self.env, self.out = run, carry, name, env, run.out
        self.tiers = spec.tiers
        self.rows, self.deaths, self.stuck = [], [], set()
        self.lock = threading.Lock()
        self.closed = threading.Condition()
        self.closes = 0  # notebooks closed so far: an allocation that failed waits for the next
        self.notebooks = []
        settings = ["park_idle_s=" + PARK_IDLE_S] + spec.settings
        # On the simulated GPU the broker is told the simulated host's size
        # (park_host_memory), as it reads a real machine's from the kernel.
        if SIM and knob("GPUSHARE_SIM_HOST_MEMORY", ""):
            settings.append("park_host_memory=" + knob("GPUSHARE_SIM_HOST_MEMORY", ""))
        self.broker = start_broker(carry, EP, os.path.join(run.out, "pressure-%s-broker.log" % name),
                                   settings,
                                   os.path.join(run.out, "pressure-%s-events.jsonl" % name), env)
        self.driver = CellDriver(carry, EP, env)

    def count(self, row):
        with self.lock:
            self.rows.append(row)

    def notebook(self, phase, i, nbytes):
        nb = Notebook(self, "%s-%s-k%d" % (self.config, phase, i),
                      self.tiers[i % len(self.tiers)], nbytes,
                      seed=1000 * len(self.notebooks) + i + 1)
        self.notebooks.append(nb)
        return nb

    def close_one(self, nb):
        nb.close()
        with self.closed:
            self.closes += 1
            self.closed.notify_all()

    def status(self):
        try:
            return json.loads(self.driver.drive("status"))
        except (TimeoutError, EOFError, ValueError, OSError):
            return None

    def stop(self):
        for nb in self.notebooks:
            if nb.proc.poll() is None:
                nb.proc.kill()
        st = self.status()
        if st is not None:
            with open(os.path.join(self.out, "pressure-%s-status.json" % self.config), "w") as f:
                json.dump(st, f, indent=1)
        self.driver.close()
        return stop_broker(self.broker, 30)


def phase_fit(cfg, n, nbytes, until):
    """N notebooks take turns, one cell at a time."""
    nbs = [cfg.notebook("fit", i, nbytes) for i in range(n)]
    for nb in nbs:
        if time.time() < until:
            cfg.run.emit(event="note", config=cfg.config, phase="fit", notebook=nb.name,
                         note="allocates")
            nb.cell("fit", 0, "alloc")
    for r in range(1, ROUNDS + 1):
        for nb in nbs:
            if time.time() < until and not nb.dead:
                nb.cell("fit", r, "cell %d" % cfg.scratch)
    for nb in nbs:
        cfg.close_one(nb)


def phase_over(cfg, n, nbytes, until):
    """More notebooks than fit, all at once; each closes when done, and an
    allocation that failed is tried again when another notebook closes."""
    nbs = [cfg.notebook("over", i, nbytes) for i in range(n)]
    think = 0.05 if SIM else 0.5  # the user reading a cell's output

    def life(nb):
        allocated = False
        while time.time() < until and not nb.dead and not allocated:
            with cfg.closed:
                closes = cfg.closes
            allocated = nb.cell("over", 0, "alloc")["ok"]
            if not allocated:
                with cfg.closed:  # wait for a notebook to close, not for a time
                    cfg.closed.wait_for(lambda: cfg.closes != closes,
                                        timeout=max(0.0, until - time.time()))
        for r in range(1, ROUNDS + 1):
            if not allocated or time.time() >= until or nb.dead:
                break
            nb.cell("over", r, "cell %d" % cfg.scratch)
            time.sleep(think)
        cfg.close_one(nb)

    threads = [threading.Thread(target=life, args=(nb,), daemon=True) for nb in nbs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, until - time.time()) + CELL_TIMEOUT + 60)


def disk_moves(out, name):
    """The tier moves of a config's event log: {"to_disk", "from_disk",
    "failed", "bytes_to_disk"}."""
    moves = {"to_disk": 0, "from_disk": 0, "failed": 0, "bytes_to_disk": 0}
    try:
        with open(os.path.join(out, "pressure-%s-events.jsonl" % name)) as f:
            events = [json.loads(line) for line in f if '"tier_move' in line]
    except (OSError, ValueError):
        return moves
    for e in events:
        if e.get("event") == "tier_move_failed":
            moves["failed"] += 1
        elif e.get("to") == "disk":
            moves["to_disk"] += 1
            moves["bytes_to_disk"] += e.get("bytes", 0)
        elif e.get("from") == "disk":
            moves["from_disk"] += 1
    return moves


def start_ballast(run, env, leave):
    """bench/eval/ballast.py, leaving `leave` bytes of the card free;
    returns (the process, its JSON line)."""
    env = dict(env, EVAL_BACKEND="sim" if SIM else "torch")
    proc = spawn([sys.executable, BALLAST, "%.6f" % (leave / GIB)], env,
                 stderr=open(os.path.join(run.out, "pressure-ballast.log"), "w"))
    info = json.loads(readline(proc, 120))
    run.emit(event="ballast", leave_bytes=leave, **info)
    return proc


def run_config(run, carry, env, m, spec, until, sampler):
    name, n, nbytes = spec.name, spec.n, spec.nbytes
    settings = {"park_idle_s": PARK_IDLE_S, "everything else": "default"}
    settings.update(kv.split("=", 1) for kv in spec.settings)
    over_n = max(n, spec.gpu_fits + spec.host_fits) + OVER_EXTRA
    run.emit(event="config", config=name, notebooks=n, bytes=nbytes, gib=round(nbytes / GIB, 3),
             scratch_bytes=m["scratch_bytes"], tiers=spec.tiers, rounds=ROUNDS,
             phases=spec.phases, over_notebooks=over_n, gpu_fits=spec.gpu_fits,
             host_fits=spec.host_fits, disk_fits=spec.disk_fits, broker_settings=settings,
             machine=m, skipped=spec.skip)
    if spec.skip:
        run.emit(event="summary", config=name, notebooks=n, skipped=spec.skip, cells=0,
                 cells_ok=0, deaths=0)
        return
    ballast = start_ballast(run, env, spec.ballast_leave) if spec.ballast_leave else None
    cfg = Config(run, carry, spec, env)
    cfg.scratch = m["scratch_bytes"]
    dmesg_before = dmesg_lines()
    sim_before = sim_host_stats() if SIM else None
    hit = False
    try:
        budget = until - time.time()
        for phase in spec.phases:
            share = 0.45 if phase == "fit" and "over" in spec.phases else 1.0
            end = min(until, time.time() + budget * share) if phase == "fit" else until
            if phase == "fit":
                phase_fit(cfg, n, nbytes, end)
            elif phase == "over":
                phase_over(cfg, over_n, nbytes, end)
            hit = hit or time.time() >= end
    finally:
        broker_rc = cfg.stop()
        if ballast:
            ballast.stdin.close()
            ballast.wait(60)
        sampler.sample()
        dmesg_after = dmesg_lines()
        new = None
        if dmesg_before is not None and dmesg_after is not None:
            seen = set(dmesg_before)
            new = [line for line in dmesg_after if line not in seen]
        rows = cfg.rows
        summary = {
            "event": "summary", "config": name, "notebooks": n, "over_notebooks": over_n,
            "bytes": nbytes, "tiers": spec.tiers,
            "cells": len(rows), "cells_ok": sum(1 for r in rows if r["ok"]),
            "bit_exact_failures": sum(1 for r in rows if r.get("bit_exact") is False),
            "cells_waited": sum(1 for r in rows if (r.get("waited_s") or 0) > 0),
            "max_waited_s": max([r.get("waited_s") or 0 for r in rows] or [0]),
            "errors": sorted({r["error"].split(":")[0] for r in rows if r.get("error")}),
            "deaths": len(cfg.deaths), "dead": cfg.deaths, "stuck": sorted(cfg.stuck),
            "deadline_hit": hit, "broker_rc": broker_rc, "broker_settings": settings,
            "mem_total": m["mem_total"], "mem_available_min": sampler.min_available,
            "dmesg": new, "dmesg_readable": new is not None,
        }
        for ph in spec.phases:
            pr = [r for r in rows if r["phase"] == ph]
            summary[ph] = {"cells": len(pr), "cells_ok": sum(1 for r in pr if r["ok"]),
                           "notebooks_finished": len({r["notebook"] for r in pr
                                                      if r["cmd"] == "cell" and r["ok"]})}
        if spec.disk_dir:
            summary["disk"] = disk_moves(run.out, name)
            summary["disk"]["images_left"] = len(os.listdir(spec.disk_dir))
            shutil.rmtree(spec.disk_dir, ignore_errors=True)
        if SIM:
            after = sim_host_stats() or {}
            summary["sim_host"] = dict(after, oom_kills=after.get("kills", 0) - (
                sim_before or {}).get("kills", 0), sampled_peak=sampler.sim_peak)
        run.emit(**summary)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    carry, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    # `timeout` sends SIGTERM: clean up (finally) as on any other end
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # and should cleaning up hang, nothing outlives this (children die
    # with the script: bench_procs.spawn)
    signal.alarm(int(DEADLINE - time.time()) + int(CELL_TIMEOUT) + 120)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(carry, "lib") + ":" +
               os.environ.get("LD_LIBRARY_PATH", ""))
    env.pop("LD_PRELOAD", None)
    run = Run(out)
    m = machine()
    sampler = Sampler(out, 0.2 if SIM else 1.0)
    sampler.start()
    try:
        todo = configs(m)
        for i, spec in enumerate(todo):
            # each configuration gets an equal share of what is left
            until = time.time() + (DEADLINE - time.time()) / (len(todo) - i)
            run_config(run, carry, env, m, spec, until, sampler)
    finally:
        sampler.stop.set()


if __name__ == "__main__":
    main()
