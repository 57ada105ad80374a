"""Chaos (issue 15): notebooks and plain programs run cells with known data
on the simulated GPU, more than fits at once (so parking moves them), while
at random moments the broker is killed and started again, a watcher
(launcher) is killed, a process is stopped (SIGSTOP) past the heartbeat
limit and continued, a parked or running process is killed.  Afterwards
every surviving program's data is intact, no cell waited longer than a
bound, and the broker's state matches the processes alive.

Seeded and reproducible: the seed is printed (pytest -s, or the log) and
GPUSHARE_CHAOS_SEED=N replays it (GPUSHARE_CHAOS_SEED=random: a new one);
GPUSHARE_CHAOS_SECONDS sets how long the chaos lasts (default 40 s, each
seed well under 3 minutes).  `make check` runs DEFAULT_SEEDS after the
other tests (`make check-chaos` in tests/ runs them alone): seeds that
passed over and over, under load too, once the bugs they found were fixed
(doc/chaos.md).  On a slower machine a seed takes other paths: a failure
prints its seed and the last steps.  GPUSHARE_CHAOS_KEEP=DIR keeps every
log, the broker's status and every process' stacks of a failed run,
GPUSHARE_CHAOS_LOG=debug adds the hooks' debug log."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import gstest
from gstest import MIB

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_LAUNCHER = os.path.join(HERE, "fake_launcher.py")
BOUND_S = 60  # a cell that waits longer than this is a hang, not a slow machine
CHUNK = 4 * MIB


class Launcher(gstest.Proc):
    """fake_launcher.py: a watcher the test can kill.  Notebook uses its
    register() and cell(); a dead one reports nothing (like a killed
    watcher)."""

    def __init__(self, env, tmp_path, name):
        super().__init__([gstest.PYTHON, FAKE_LAUNCHER], env, tmp_path, name + "-launcher",
                         bufsize=1)
        self.session = None

    def alive(self):
        return self.proc.poll() is None

    def register(self, kernel_id, pid):
        self.send("register %s %d" % (kernel_id, pid))
        line = self.expect("", BOUND_S)
        assert line.startswith("registered "), line
        self.session = line.split()[1]
        return self.session

    def cell(self, session, state, msg_id="m"):
        if not self.alive():
            return
        try:
            self.send("%s %s %s" % (state, session, msg_id))
            self.expect("ok", BOUND_S)
        except (BrokenPipeError, AssertionError):
            if self.alive():
                raise


class Program:
    """One notebook (with a launcher) or plain program (without), its
    buffers and the seed each holds."""

    def __init__(self, name, nb, launcher):
        self.name, self.nb, self.launcher = name, nb, launcher
        self.buffers = {}  # name -> seed
        self.stopped_until = None
        self.timer = None  # continues it on time, whatever the test waits for meanwhile
        self.n = 0

    def alive(self):
        return self.nb.proc.poll() is None

    def run(self, line, stats, log):
        t = time.monotonic()
        answer = self.nb.cell(line, timeout=BOUND_S)
        took = time.monotonic() - t
        stats["max_wait_s"] = max(stats["max_wait_s"], took)
        stats["cells"] += 1
        if took > 5:
            log.append("%s: %r took %.1f s" % (self.name, line, took))
        return answer


DEFAULT_SEEDS = (3, 7, 9)


def seeds():
    chosen = os.environ.get("GPUSHARE_CHAOS_SEED")
    if chosen == "random":
        return [random.randrange(1 << 30)]
    return [int(chosen)] if chosen else list(DEFAULT_SEEDS)


@pytest.mark.parametrize("seed", seeds())
def test_chaos(short_tmp, notebooks, seed):
    seconds = float(os.environ.get("GPUSHARE_CHAOS_SECONDS", "40"))
    print("chaos seed %d (GPUSHARE_CHAOS_SEED=%d replays it)" % (seed, seed), file=sys.stderr)
    rng = random.Random(seed)
    settings = ("park_idle_s=0", "heartbeat_ms=300")
    b, sim, make = notebooks("128M", *settings, GPUSHARE_POOL_CHUNK=str(CHUNK))
    state = {"broker": b}
    launchers = []

    # GPUSHARE_CHAOS_LOG=debug: the hooks' debug log in each program's stderr.
    hook_log = {"GPUSHARE_LOG": os.environ["GPUSHARE_CHAOS_LOG"]} \
        if os.environ.get("GPUSHARE_CHAOS_LOG") else {}

    def new_program(i):
        name = "p%d" % i
        if i < 3:  # notebooks, each with its watcher; the rest are plain programs
            la = Launcher(gstest.hook_env(sim, b.endpoint), short_tmp, name)
            launchers.append(la)
            nb = gstest.Notebook(name, gstest.hook_env(sim, b.endpoint, GPUSHARE_SWAP="on",
                                                       **hook_log), short_tmp, la, True)
        else:
            la = None
            nb = make(name, False, GPUSHARE_SWAP="on", **hook_log)
        return Program(name, nb, la)

    programs = [new_program(i) for i in range(5)]
    stats = {"cells": 0, "max_wait_s": 0.0, "broker_kills": 0, "stops": 0, "kills": 0,
             "launcher_kills": 0, "parks": 0}
    log = []

    def restart_broker():
        state["broker"].stop(signal.SIGKILL)
        args = [a for s in settings for a in ("--set", s)]
        nb = gstest.Broker(short_tmp, sim, args, event_log=True)
        nb.stderr_path = short_tmp / ("broker-%d.stderr" % stats["broker_kills"])
        state["broker"] = nb.start()
        for p in programs:  # a watcher registers its kernel again with the new broker
            if p.launcher and p.launcher.alive() and p.alive():
                p.launcher.register(p.name, p.nb.pid)

    def resume_due(now):
        for p in programs:
            if p.stopped_until and now >= p.stopped_until:
                p.timer.cancel()
                p.nb.proc.send_signal(signal.SIGCONT)
                p.stopped_until = None

    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            now = time.monotonic()
            resume_due(now)
            running = [p for p in programs if p.alive() and not p.stopped_until]
            roll = rng.random()
            if roll < 0.04 and stats["broker_kills"] < 3:
                log.append("kill the broker")
                stats["broker_kills"] += 1
                restart_broker()
            elif roll < 0.10 and len(running) > 2:
                p = rng.choice(running)
                p.stopped_until = now + rng.uniform(0.2, 2.0)
                log.append("stop %s for %.1f s" % (p.name, p.stopped_until - now))
                stats["stops"] += 1
                p.nb.proc.send_signal(signal.SIGSTOP)
                # A cell of another program may block the loop for longer.
                p.timer = threading.Timer(p.stopped_until - now, p.nb.proc.send_signal,
                                          (signal.SIGCONT,))
                p.timer.start()
            elif roll < 0.12 and stats["kills"] < 1 and len(running) > 3:
                # A parked one when there is one: its host memory must go back.
                parked = [p for p in running
                          if (gstest.session_of(state["broker"].status(), p.nb.pid) or {})
                          .get("parking") == "parked"]
                p = rng.choice(sorted(parked or running, key=lambda p: p.name))
                log.append("kill %s%s" % (p.name, " (parked)" if parked else ""))
                stats["kills"] += 1
                p.nb.kill()
            elif roll < 0.14 and stats["launcher_kills"] < 1:
                alive = [la for la in launchers if la.alive()]
                if alive:
                    la = rng.choice(alive)
                    log.append("kill %s" % la.name)
                    stats["launcher_kills"] += 1
                    la.kill()
            elif running:
                p = rng.choice(running)
                p.n += 1
                if not p.buffers or (len(p.buffers) < 2 and rng.random() < 0.4):
                    name = "b%d" % p.n
                    size = rng.choice([16, 24, 32]) * MIB
                    if p.run("alloc %s %d" % (name, size), stats, log) == "ok":
                        s = rng.randrange(1, 1000)
                        assert p.run("fill %s %d" % (name, s), stats, log) == "ok"
                        p.buffers[name] = s
                        log.append("%s alloc %s %d MiB seed %d" % (p.name, name, size >> 20, s))
                else:
                    name = rng.choice(sorted(p.buffers))
                    what = rng.random()
                    if what < 0.5:
                        answer = p.run("check %s %d" % (name, p.buffers[name]), stats, log)
                        assert answer == "ok", (seed, p.name, name, answer, log[-20:],
                                                p.nb.stderr()[-3000:])
                    elif what < 0.7:
                        s = rng.randrange(1, 1000)
                        assert p.run("fill %s %d" % (name, s), stats, log) == "ok"
                        p.buffers[name] = s
                    else:
                        assert p.run("run %d" % rng.randint(1, 5), stats, log) == "ok"
        resume_due(float("inf"))
        # Every survivor's data is intact.
        for p in programs:
            if not p.alive():
                continue
            for name, s in sorted(p.buffers.items()):
                answer = p.run("check %s %d" % (name, s), stats, log)
                assert answer == "ok", (seed, p.name, name, answer, log[-20:])
        # The broker's state matches the processes alive: every pid it
        # shows lives, and the killed ones are gone.
        br = state["broker"]
        alive = {p.nb.pid for p in programs if p.alive()}
        dead = {p.nb.pid for p in programs if not p.alive()}

        def pids_shown():
            return {pid for g in br.status()["gpus"] for s in g["sessions"] for pid in s["pids"]}
        gstest.wait_until(lambda: not (pids_shown() & dead), timeout=BOUND_S,
                          what="the broker to forget the killed processes")
        assert pids_shown() <= alive | {os.getpid()}
        assert br.proc.poll() is None, br.log()
        stats["parks"] = len(br.events("park"))  # the log is appended to by every broker
        assert stats["parks"] > 0, "nothing was parked: the chaos did not reach parking"
        print("chaos seed %d: %s" % (seed, stats), file=sys.stderr)
        print("\n".join(line for line in log if " took " in line), file=sys.stderr)
        assert stats["max_wait_s"] < BOUND_S
    except BaseException:
        print("chaos seed %d failed; what happened last:\n  %s" % (seed, "\n  ".join(log[-40:])),
              file=sys.stderr)
        print("broker log (last 60 lines):\n" + "\n".join(state["broker"].log().splitlines()[-60:]),
              file=sys.stderr)
        keep = os.environ.get("GPUSHARE_CHAOS_KEEP")  # a folder for every log of the run
        if keep:
            try:
                with open(os.path.join(str(short_tmp), "status.json"), "w") as f:
                    json.dump(state["broker"].status(), f, indent=1)
            except Exception as e:  # a dead or hung broker: its log says more
                print("no status: %s" % e, file=sys.stderr)
            # Where every process is stuck, while they still are.
            procs = [("broker", state["broker"].proc)] + [(p.name, p.nb.proc) for p in programs]
            for name, proc in procs:
                if proc.poll() is None:
                    with open(os.path.join(str(short_tmp), name + ".stacks"), "w") as f:
                        subprocess.run(["gdb", "-batch", "-p", str(proc.pid), "-ex",
                                        "thread apply all bt"], stdout=f,
                                       stderr=subprocess.STDOUT, timeout=60, check=False)
            shutil.copytree(short_tmp, keep, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.sock"))
        raise
    finally:
        for p in programs:
            if p.stopped_until:
                p.timer.cancel()
                p.nb.proc.send_signal(signal.SIGCONT)
            p.nb.kill()
        for la in launchers:
            la.kill()
        if state["broker"] is not b:
            state["broker"].stop()
