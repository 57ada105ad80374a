"""Every tier survives broker death, on a real GPU (issue 33, item 5).  Two
notebooks of S GiB (together more than the card: S = 0.6 of it) under a
broker with its default settings (park_idle_s=0): a on the checkpoint tier
(its hook's swap off), b on the swap tier.  b's allocation parks a; b
closes, so that a's memory has room again; the broker is killed (SIGKILL);
a's next cell must come back without any broker (the hook starts
gpushare-restore, which restores and unlocks it), bit-exact at the same
address.  Then the same with a parked on the swap tier.  One JSON line per
case: {"case", "tier", "bytes", "back_s", "ok", "bit_exact",
"same_address"}.
    broker_death.py CARRY_DIR OUT_DIR"""
import json
import os
import sys
import time

import pressure as P
from bench_procs import readline

CARRY, OUT = sys.argv[1], sys.argv[2]


def ask(nb, cmd, timeout=240):
    nb.proc.stdin.write(cmd + "\n")
    nb.proc.stdin.flush()
    return json.loads(readline(nb.proc, timeout))


def case(run, tier, nbytes):
    env = dict(os.environ, GPUSHARE_RESTORE_HELPER=os.path.join(CARRY, "gpushare",
                                                                 "gpushare-restore"))
    cfg = P.Config(run, CARRY, "death-" + tier, env)
    a = cfg.notebook("x", 0 if tier == "swap" else 1, nbytes)  # TIERS: swap, checkpoint
    b = cfg.notebook("x", 2, nbytes)
    row = {"event": "case", "case": "broker killed while parked", "tier": a.tier,
           "bytes": nbytes}
    try:
        assert a.cell("x", 0, "alloc")["ok"]
        assert b.cell("x", 0, "alloc")["ok"]  # parks a
        st = cfg.status()
        ent = [e for g in st["gpus"] for e in g["sessions"] if e["id"] == a.name][0]
        row["parked_before"] = ent.get("parking")
        row["park_tier"] = ent.get("park_tier")
        cfg.close_one(b)  # its memory frees: room for a to come back
        cfg.broker.kill()
        cfg.broker.wait(30)
        t0 = time.time()
        r = ask(a, "cell %d" % (1 << 30))
        row.update(back_s=round(time.time() - t0, 3), ok=r.get("ok"),
                   bit_exact=r.get("bit_exact"), same_address=r.get("same_address"),
                   error=r.get("error"))
    except Exception as e:  # the row says what went wrong
        row["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        for nb in (a, b):
            if nb.proc.poll() is None:
                nb.proc.kill()
        cfg.driver.close()
    run.emit(**row)
    return row


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs("/tmp/gs", exist_ok=True)
    run = P.Run(OUT)
    nbytes = int(P.gpu_total_bytes() * 0.6) // (2 << 20) * (2 << 20)
    rows = [case(run, t, nbytes) for t in ("checkpoint", "swap")]
    run.emit(event="summary", cases=len(rows),
             ok=sum(1 for r in rows if r.get("ok") and r.get("bit_exact")))


if __name__ == "__main__":
    main()
