"""Two ordinary users' programs taking turns on one GPU through the system
broker, parked on the checkpoint tier (issue 34, item 2), on a real GPU.

gs-alice and gs-bob (created here; run as root) each run a plain program
outside Jupyter (pressure_worker.py under the hook, GPUSHARE_SWAP=off:
the checkpoint tier) holding SIZE bytes, more than half the GPU, so that
only one fits.  The broker runs as the system service does (--system,
--socket-group gs-users, park_plain=on).  Their cells alternate: each one
must bring its program back (the other parked for it) and find its data
bit-exact at the same address.  A locked process's CUDA calls block inside
the driver; before `frozen` a parked plain program's next call waited
there for ever.

    python3 tests/gpu/users_turns.py CARRY OUT
Environment: TURNS_FRACTION (0.55 of the GPU each), TURNS_ROUNDS (3),
TURNS_CELL_TIMEOUT_S (120), TURNS_SCRATCH_BYTES (1 GiB: each cell's
temporaries); a dry run on the simulated GPU: PRESSURE_BACKEND=sim,
TURNS_GPU_BYTES and the simulated GPU's environment (GPUSHARE_SIM_SHARED=1).  Writes OUT/users-turns.jsonl (one row per
cell, then a summary row) and OUT/users-turns-*.log."""
import json
import os
import shutil
import subprocess
import sys
import time

from bench_procs import readline

HERE = os.path.dirname(os.path.abspath(__file__))
USERS = ("gs-alice", "gs-bob")
GROUP = "gs-users"
GIB = 1 << 30


def sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=60)


def accounts():
    if sh("getent", "group", GROUP, check=False).returncode != 0:
        sh("groupadd", "--system", GROUP)
    for u in USERS:
        if sh("id", u, check=False).returncode != 0:
            sh("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
               "--groups", GROUP, u)


def gpu_total():
    if os.environ.get("TURNS_GPU_BYTES"):  # the simulated GPU's (a dry run)
        return int(os.environ["TURNS_GPU_BYTES"])
    out = sh("nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits").stdout
    return int(out.split()[0]) << 20


def main():
    carry, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    frac = float(os.environ.get("TURNS_FRACTION", "0.55"))
    rounds = int(os.environ.get("TURNS_ROUNDS", "3"))
    cell_timeout = float(os.environ.get("TURNS_CELL_TIMEOUT_S", "120"))
    scratch = int(os.environ.get("TURNS_SCRATCH_BYTES", str(GIB)))
    accounts()
    dmesg_before = len(sh("dmesg", check=False).stdout.splitlines())
    # What the users run must be theirs to read: a copy in a directory of
    # root's that all may enter.
    base = "/tmp/gsu"
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base + "/run")
    os.chmod(base, 0o755)
    os.chmod(base + "/run", 0o755)
    shutil.copytree(carry, base + "/carry")
    shutil.copy(os.path.join(HERE, "pressure_worker.py"), base)
    subprocess.run(["chmod", "-R", "a+rX", base], check=True)
    endpoint = "ipc://%s/run/broker.sock" % base
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(x for x in (base + "/carry/lib", env.get("LD_LIBRARY_PATH"))
                                      if x)
    events = os.path.join(out, "users-turns-events.jsonl")
    broker = subprocess.Popen(
        [base + "/carry/gpushare/gpushare-broker", "-v", "--system", "--socket-group", GROUP,
         "-e", endpoint, "--event-log", events, "--set", "park_plain=on", "--set",
         "park_swap=off", "--set", "park_idle_s=0"],
        env=env, stdin=subprocess.DEVNULL, stderr=open(os.path.join(out, "users-turns-broker.log"), "w"))
    deadline = time.time() + 30
    while not os.path.exists(endpoint[len("ipc://"):]):
        if broker.poll() is not None or time.time() > deadline:
            raise SystemExit("broker did not start")
        time.sleep(0.05)  # waiting for a process to bind: no event to await
    size = int(gpu_total() * frac) >> 20 << 20
    rows, procs = [], {}
    resf = open(os.path.join(out, "users-turns.jsonl"), "w")

    def emit(row):
        rows.append(row)
        resf.write(json.dumps(row) + "\n")
        resf.flush()
        print(json.dumps(row), flush=True)

    for i, u in enumerate(USERS):
        home = "%s/home-%s" % (base, u)
        os.makedirs(home)
        shutil.chown(home, u, u)
        uenv = dict(env, HOME=home, USER=u, LOGNAME=u, GPUSHARE_BROKER=endpoint,
                    GPUSHARE_SWAP="off", PYTHONUNBUFFERED="1")
        # LD_PRELOAD after setpriv: the hook is the user's, not root's.
        argv = ["setpriv", "--reuid=" + u, "--regid=" + u, "--init-groups", "--", "env",
                "LD_PRELOAD=%s/carry/gpushare/libgpushare-hook.so" % base, sys.executable,
                base + "/pressure_worker.py", str(size), str(i + 1)]
        procs[u] = subprocess.Popen(argv, env=uenv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=open(os.path.join(out, "users-turns-%s.log" % u), "w"),
                                    text=True)

    def ask(u, cmd, n):
        p = procs[u]
        t0 = time.time()
        p.stdin.write(cmd + "\n")
        p.stdin.flush()
        row = {"user": u, "cmd": cmd.split()[0], "n": n, "bytes": size}
        try:
            row.update(json.loads(readline(p, cell_timeout)))
        except TimeoutError:
            row.update(ok=False, error="timeout: no answer within %.0f s" % cell_timeout)
        except EOFError:
            row.update(ok=False, error="died")
        row["wall_s"] = round(time.time() - t0, 3)
        emit(row)
        return row

    ok = True
    for u in USERS:
        ok &= bool(ask(u, "alloc", 0).get("ok"))
    for n in range(1, rounds + 1):
        for u in USERS:
            if ok:
                ok &= bool(ask(u, "cell %d" % scratch, n).get("ok"))
    status = json.loads(sh(base + "/carry/gpushare/gpushare", "--broker", endpoint, "status",
                           "--json", check=False).stdout or "{}")
    owners = sorted({s.get("user") for g in status.get("gpus", []) for s in g.get("sessions", [])})
    for p in procs.values():
        try:
            p.stdin.write("quit\n")
            p.stdin.flush()
        except OSError:
            pass
    for p in procs.values():
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
    broker.terminate()
    broker.wait(60)
    parks = []
    with open(events) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") in ("park", "unpark"):
                parks.append({k: e.get(k) for k in ("event", "session", "seconds", "tier")})
    dmesg = [line for line in sh("dmesg", check=False).stdout.splitlines()[dmesg_before:]
             if "Out of memory" in line or "Killed process" in line or "NVRM" in line]
    cells = [r for r in rows if r["cmd"] == "cell"]
    emit({"summary": True, "gpu_bytes": gpu_total(), "bytes_each": size, "users": owners,
          "cells": len(cells), "cells_ok": sum(1 for r in cells if r.get("ok")),
          "bit_exact": all(r.get("bit_exact") for r in cells) and bool(cells),
          "same_address": all(r.get("same_address") for r in cells) and bool(cells),
          "parks": sum(1 for e in parks if e["event"] == "park"),
          "unparks": sum(1 for e in parks if e["event"] == "unpark"),
          "park_s": [e["seconds"] for e in parks if e["event"] == "park"],
          "unpark_s": [e["seconds"] for e in parks if e["event"] == "unpark"],
          "dmesg": dmesg[-10:]})


if __name__ == "__main__":
    main()
