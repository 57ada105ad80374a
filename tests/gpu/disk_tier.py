"""The disk tier on a real GPU (issue 37): in one run, the disk's own
sequential speed (dd, O_DIRECT), then a PyTorch 'notebook' of GIB GiB
parked on the swap tier (it asks, as %gpushare release does), moved on to
the disk tier after park_disk_idle_s, and brought back by its next cell:
bit-exact at the same address, with the times of each move from the
broker's event log.  Writes JSON lines to stdout; the last is the row of
bench/results/disk-tier-*.jsonl.
    disk_tier.py CARRY_DIR OUT_DIR GIB DISK_DIR"""
import json
import os
import re
import subprocess
import sys
import time

from bench_procs import CellDriver, readline, shut_down, start_broker

CARRY, OUT, GIB, DISK = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
HERE = os.path.dirname(os.path.abspath(__file__))
EP = "ipc:///tmp/gs/disk.sock"
env = dict(os.environ, GPUSHARE_BROKER=EP,
           LD_LIBRARY_PATH=os.path.join(CARRY, "lib") + ":" + os.environ.get("LD_LIBRARY_PATH", ""))


def emit(**kw):
    print(json.dumps(kw), flush=True)


def dd(args):
    """dd's GB/s (its last line: '... copied, 3.4 s, 2.5 GB/s')."""
    r = subprocess.run(["dd"] + args, capture_output=True, text=True, timeout=300)
    m = re.search(r"copied, ([\d.]+) s, ([\d.]+) ([GM])B/s", r.stderr)
    if not m:
        raise RuntimeError("dd %s: %s" % (args, r.stderr))
    return float(m.group(2)) / (1000.0 if m.group(3) == "M" else 1.0)


def disk_speed():
    os.makedirs(DISK, mode=0o700, exist_ok=True)
    probe = os.path.join(DISK, "dd.bin")
    count = int(GIB * 16)  # 64 MiB blocks: as much as the notebook
    w = dd(["if=/dev/zero", "of=" + probe, "bs=64M", "count=%d" % count, "oflag=direct",
            "conv=fdatasync"])
    r = dd(["if=" + probe, "of=/dev/null", "bs=64M", "iflag=direct"])
    os.unlink(probe)
    emit(event="disk", write_gbps=w, read_gbps=r, bytes=count << 26)
    return w, r


def events(path, kind):
    try:
        return [json.loads(x) for x in open(path) if '"event":"%s"' % kind in x.replace(" ", "")]
    except FileNotFoundError:
        return []


def main():
    write_gbps, read_gbps = disk_speed()
    ev = os.path.join(OUT, "disk-events.jsonl")
    broker = start_broker(CARRY, EP, os.path.join(OUT, "disk-broker.log"),
                          ["park_disk_dir=" + DISK, "park_disk_idle_s=" +
                           os.environ.get("DISK_IDLE_S", "2")], ev, env)
    driver = CellDriver(CARRY, EP, env)
    drive = driver.drive
    wenv = dict(env, LD_PRELOAD=os.path.join(CARRY, "gpushare", "libgpushare-hook.so"),
                GPUSHARE_SESSION="k1", GPUSHARE_LOG="info", GPUSHARE_SWAP="on")
    drive("register k1")
    worker = subprocess.Popen([sys.executable, os.path.join(HERE, "park_worker.py"), str(GIB), "1"],
                              env=wenv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              stderr=open(os.path.join(OUT, "disk-worker.log"), "w"))
    row = {"tier": "disk", "bytes": None, "park_s": None, "unpark_s": None, "bit_exact": False,
           "disk_write_gbps": write_gbps, "disk_read_gbps": read_gbps}

    def cell(cmd):
        t0 = time.time()
        drive("busy k1")
        worker.stdin.write(cmd + "\n")
        worker.stdin.flush()
        line = readline(worker, 400)
        drive("idle k1")
        emit(event=cmd, answer=line, wall_s=round(time.time() - t0, 2))
        return line.split(), time.time() - t0

    def tier():
        st = json.loads(drive("status"))
        for g in st["gpus"]:
            for s in g["sessions"]:
                if s["id"] == "k1":
                    return s.get("park_tier"), s
        return None, None

    def wait_tier(want, limit):
        t0 = time.time()
        while time.time() - t0 < limit:
            t, s = tier()
            if t == want:
                return s
            time.sleep(0.2)
        raise RuntimeError("k1 not on the %s tier after %d s: %s" % (want, limit, tier()[1]))

    try:
        words, _ = cell("alloc")
        address = words[1]
        # The pool pins what the park needs first (pinning is not measured).
        t0 = time.time()
        while time.time() - t0 < 240:
            pools = json.loads(drive("status"))["parking"].get("pool") or [{}]
            if pools[0].get("pinned_bytes", 0) >= GIB * (1 << 30):
                break
            time.sleep(0.5)
        emit(event="pool_wait", wait_s=round(time.time() - t0, 2))
        emit(event="park", answer=drive("park k1"))
        wait_tier("swap", 120)
        wait_tier("disk", 300)
        out = [e for e in events(ev, "tier_move") if e.get("to") == "disk"][-1]
        emit(event="to_disk", move=out)
        row["bytes"] = out["bytes"]
        row["park_s"] = out["seconds"]
        emit(event="pool_after", pool=json.loads(drive("status"))["parking"].get("pool"))
        words, wall = cell("cell")  # "cell ok|CORRUPT ADDR S"
        back = [e for e in events(ev, "tier_move") if e.get("from") == "disk"]
        unpark = [e for e in events(ev, "unpark") if e.get("session") == "k1"]
        emit(event="from_disk", moves=back, unpark=unpark, cell_wall_s=round(wall, 2))
        if back and unpark:
            row["read_s"] = back[-1]["seconds"]
            row["swap_in_s"] = unpark[-1]["seconds"]
            row["unpark_s"] = round(back[-1]["seconds"] + unpark[-1]["seconds"], 3)
        row["bit_exact"] = words[1] == "ok" and words[2] == address
        row["park_disk_gbps"] = round(row["bytes"] / row["park_s"] / 1e9, 2) if row["park_s"] else None
        row["unpark_disk_gbps"] = (round(row["bytes"] / row["unpark_s"] / 1e9, 2)
                                   if row["unpark_s"] else None)
        # (the broker removes an image on a thread of its own: an unlink of
        # gigabytes takes seconds; 10 s for it, polled)
        until = time.time() + 10
        while True:
            row["images_left"] = [f for f in os.listdir(DISK) if f.endswith(".gspark")]
            if not row["images_left"] or time.time() >= until:
                break
            time.sleep(0.1)
        json.dump(json.loads(drive("status")), open(os.path.join(OUT, "disk-status.json"), "w"),
                  indent=1)
    finally:
        shut_down([worker], driver, broker)
        emit(**row)


if __name__ == "__main__":
    main()
