#!/usr/bin/env python3
"""Switch times from a broker's event log: for each cell that found its
session parked, the time from the cell's start (the launcher's `busy`) to
the session back on the GPU (its `unpark`), with the park that made room.
  python3 bench/switch_times.py park-events.jsonl  -> one JSON line per switch"""
import json
import sys


def main(path):
    ev = [json.loads(line) for line in open(path) if line.strip()]
    busy = {}
    for e in ev:
        if e["event"] == "cell" and e.get("state") == "busy":
            busy[e["session"]] = e["ts"]
        elif e["event"] == "unpark" and e["session"] in busy:
            t0 = busy.pop(e["session"])
            out = next((p for p in ev if p["event"] == "park" and p["ts"] >= t0
                        and p["session"] != e["session"]), None)
            print(json.dumps({"session": e["session"], "tier": e.get("tier"),
                              "bytes": e["bytes"],
                              "switch_s": round(e["ts"] - t0, 3),
                              "unpark_s": round(e["seconds"], 3),
                              "out_session": out and out["session"],
                              "out_park_s": out and round(out["seconds"], 3),
                              "out_tier": out and out.get("tier")}))


if __name__ == "__main__":
    main(sys.argv[1])
