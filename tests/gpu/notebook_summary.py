"""Checks and summarises run_h200.sh's `notebook` section (issue 5 on the
GPU): two notebooks of PyTorch cells started by gpushare-launch (through
mini_kernel.py) sharing the GPU under the exclusive policy.

    notebook_summary.py OUT      -> one JSON line; exit 1 if a check fails

Checks, from the broker's event log and the notebooks' outputs: both
sessions registered under their kernel ids; every cell reported busy then
idle; each notebook's weights equal the native run's (same seed, cells and
steps); the two never held the GPU at once; every grant taken back because
a cell ended (reason cell_idle) or the quantum; the hand-over time from
one notebook's cell end (the broker's `cell idle`) to the grant of the
other, when the other's cell was already waiting; and revoke to release."""
import json
import os
import statistics
import sys


def load_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def main(out):
    native = load_lines(os.path.join(out, "nb-native.json"))[-1]
    nbs = {k: load_lines(os.path.join(out, "nb-%s.json" % k))[-1] for k in ("A", "B")}
    ev = load_lines(os.path.join(out, "notebook-events.jsonl"))
    failures = []
    sessions = {"nbA", "nbB"}
    registered = {e["session"] for e in ev if e["event"] == "register"}
    if registered != sessions:
        failures.append("registered sessions %s" % sorted(registered))
    for k, nb in nbs.items():
        if nb["digest"] != native["digest"]:
            failures.append("notebook %s weights differ from native" % k)
        cells = [e["state"] for e in ev if e["event"] == "cell" and e["session"] == "nb" + k]
        if cells != ["busy", "idle"] * len(nb["cells"]):
            failures.append("notebook %s cell events %s" % (k, cells))
    # Holding: from grant to release, per session; never both at once.
    holding, overlap, handoffs, last_idle, busy_since = set(), 0, [], {}, {}
    revoked_at, drains = {}, []
    reasons = []
    for e in ev:
        s = e.get("session")
        if e["event"] == "grant":
            if holding - {s}:
                overlap += 1
            holding.add(s)
            other = (sessions - {s}).pop() if s in sessions else None
            # A hand-over: this notebook's cell was already waiting when the
            # other's cell ended.
            if other in last_idle and busy_since.get(s, 1e300) < last_idle[other]:
                handoffs.append((e["ts"] - last_idle.pop(other)) * 1e3)
        elif e["event"] == "release":
            holding.discard(s)
            if s in revoked_at:
                drains.append((e["ts"] - revoked_at.pop(s)) * 1e3)
        elif e["event"] == "revoke":
            reasons.append(e.get("reason"))
            revoked_at[s] = e["ts"]
        elif e["event"] == "cell" and e["state"] == "idle":
            last_idle[s] = e["ts"]
            busy_since.pop(s, None)
        elif e["event"] == "cell" and e["state"] == "busy":
            last_idle.pop(s, None)
            busy_since[s] = e["ts"]
    if overlap:
        failures.append("both notebooks held the GPU at once %d times" % overlap)
    summary = {
        "native_digest": native["digest"],
        "digests": {k: nb["digest"] for k, nb in nbs.items()},
        "cells": {k: len(nb["cells"]) for k, nb in nbs.items()},
        "grants": sum(1 for e in ev if e["event"] == "grant"),
        "revoke_reasons": {r: reasons.count(r) for r in set(reasons)},
        "handoff_ms": {"n": len(handoffs),
                       "p50": round(statistics.median(handoffs), 3) if handoffs else None,
                       "max": round(max(handoffs), 3) if handoffs else None},
        "revoke_to_release_ms": {"n": len(drains),
                                 "p50": round(statistics.median(drains), 3) if drains else None,
                                 "max": round(max(drains), 3) if drains else None},
        "cell_s": {k: round(statistics.median(b - a for a, b in nb["cells"]), 4)
                   for k, nb in nbs.items()},
        "native_cell_s": round(statistics.median(b - a for a, b in native["cells"]), 4),
        "failures": failures,
    }
    print(json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
