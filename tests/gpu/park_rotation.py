"""The parking validation on a real GPU (issue 6): three 'notebooks', each
holding GIB of GPU memory (together more than the card), run cells in turn
under gpushare; the broker parks idle ones in host RAM (CUDA checkpoint API)
and unparks each when its cell starts.  Records every cell's wall time and
whether its data came back bit-exact at the same address, and the broker's
park/unpark times and GB/s.  Writes JSON lines to stdout.
    park_rotation.py CARRY_DIR OUT_DIR [GIB] [ROUNDS]"""
import json
import os
import subprocess
import sys
import time

from bench_procs import CellDriver, readline, shut_down, start_broker

CARRY, OUT = sys.argv[1], sys.argv[2]
GIB = float(sys.argv[3]) if len(sys.argv) > 3 else 60
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 2
N = int(os.environ.get("PARK_N", "3"))  # notebooks taking turns
KS = tuple(range(1, N + 1))
HERE = os.path.dirname(os.path.abspath(__file__))
EP = "ipc:///tmp/gs/park.sock"
# PARK_SWAP=1: the notebooks' hooks use the swap tier (GPUSHARE_SWAP=on) and
# each step waits until the broker's host pool has pinned what the next
# park needs (pinning happens once, ahead of time; its wait is reported).
SWAP = os.environ.get("PARK_SWAP") == "1"
env = dict(os.environ, GPUSHARE_BROKER=EP,
           LD_LIBRARY_PATH=os.path.join(CARRY, "lib") + ":" + os.environ.get("LD_LIBRARY_PATH", ""))


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    # PARK_SET: more settings ("placement=pack" for the move on two GPUs).
    settings = ["park_idle_s=0", "park_host_budget=" + os.environ.get("PARK_HOST_BUDGET", "100G")]
    broker = start_broker(CARRY, EP, os.path.join(OUT, "park-broker.log"),
                          settings + os.environ.get("PARK_SET", "").split(),
                          os.path.join(OUT, "park-events.jsonl"), env)
    driver = CellDriver(CARRY, EP, env)
    drive = driver.drive

    workers = {}
    for k in KS:
        wenv = dict(env, LD_PRELOAD=os.path.join(CARRY, "gpushare", "libgpushare-hook.so"),
                    GPUSHARE_SESSION="k%d" % k, GPUSHARE_MAKE_ROOM_TIMEOUT_MS="300000",
                    GPUSHARE_LOG="info", GPUSHARE_SWAP="on" if SWAP else "off")
        drive("register k%d" % k)
        workers[k] = subprocess.Popen([sys.executable, os.path.join(HERE, "park_worker.py"),
                                       str(GIB), str(k)], env=wenv, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True,
                                      stderr=open(os.path.join(OUT, "park-worker%d.log" % k), "w"))
    addresses = {}

    def cell(k, cmd):
        t0 = time.time()
        drive("busy k%d" % k)
        workers[k].stdin.write(cmd + "\n")
        workers[k].stdin.flush()
        line = readline(workers[k], 400)
        drive("idle k%d" % k)
        words = line.split()  # "allocated ADDR S" or "cell ok|CORRUPT ADDR S"
        addr = words[1] if cmd == "alloc" else words[2]
        if cmd == "alloc":
            addresses[k] = addr
        emit(event=cmd, session="k%d" % k, answer=line, wall_s=round(time.time() - t0, 2),
             same_address=addresses.get(k) == addr,
             bit_exact=(words[1] == "ok") if cmd == "cell" else None)

    def pool_ready(need):
        """Waits (status polled: pinning reports no event) until the pool
        has `need` bytes pinned or 240 s passed; records the wait."""
        t0 = time.time()
        while True:
            st = json.loads(drive("status"))
            pools = st.get("parking", {}).get("pool") or [{}]
            pinned = pools[0].get("pinned_bytes", 0)
            # No more than the budget allows (the default budget, half the
            # RAM, holds one 60 GB notebook and a few chunks: a switch
            # relays the incoming notebook's chunks to the outgoing one).
            chunk = pools[0].get("chunk_bytes") or 1
            need = min(need, pools[0].get("budget_bytes", need) // chunk * chunk)
            if pinned >= need or time.time() - t0 > 240:
                emit(event="pool_wait", pinned_bytes=pinned, need_bytes=need,
                     wait_s=round(time.time() - t0, 2), pool=pools[0])
                return
            time.sleep(0.5)

    need = int(GIB * (1 << 30))
    try:
        for k in KS:
            if SWAP and k == N:
                pool_ready(need)
            cell(k, "alloc")
        for r in range(ROUNDS):
            for k in KS:
                if SWAP:
                    pool_ready(2 * need)
                cell(k, "cell")
        st = json.loads(drive("status"))
        json.dump(st, open(os.path.join(OUT, "park-status.json"), "w"), indent=1)
        # What each process holds on the GPU now (a parked one: its context
        # and what stays behind).
        smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True)
        pids = {w.pid: "k%d" % k for k, w in workers.items()}
        for row in smi.stdout.splitlines():
            pid, gpu, mib = (x.strip() for x in row.split(","))
            emit(event="gpu_memory", session=pids.get(int(pid), pid), gpu=gpu, used_mib=int(mib))
        for g in st["gpus"]:
            for s in g["sessions"]:
                emit(event="session", **{key: s.get(key) for key in (
                    "id", "state", "resident_bytes", "parked_bytes", "parks", "unparks",
                    "last_park_s", "last_park_gbps", "last_unpark_s", "last_unpark_gbps",
                    "parking", "park_error", "park_tier")})
            emit(event="gpu", park_gbps=g.get("park_gbps"), unpark_gbps=g.get("unpark_gbps"))
    finally:
        shut_down(list(workers.values()), driver, broker)
        emit(event="end", broker_rc=broker.returncode)


if __name__ == "__main__":
    main()
