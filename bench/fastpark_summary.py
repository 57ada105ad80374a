"""Summarises a fastpark run (tests/gpu/run_h200.sh fastpark) into one JSON
object per measurement, the format doc/parking.md quotes:
{"tier", "variant", "session", "bytes", "park_s", "unpark_s", "bit_exact",
"same_address"} for each park of a session paired with its next unpark (and
the check of its data in the cell that brought it back), then what each
process parked at the end keeps on the GPU against a bare PyTorch context.
    fastpark_summary.py OUT_DIR   (reads OUT_DIR/fastpark-*/ and
                                   OUT_DIR/fastpark-context.json)"""
import glob
import json
import os
import sys


def lines(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def main(out_dir):
    ctx = (lines(os.path.join(out_dir, "fastpark-context.json")) or [{}])[0]
    for d in sorted(glob.glob(os.path.join(out_dir, "fastpark-*/"))):
        variant = os.path.basename(d.rstrip("/"))[len("fastpark-"):]
        events = lines(os.path.join(d, "park-events.jsonl"))
        run = lines(os.path.join(d, "park.jsonl"))
        cells = [r for r in run if r.get("event") == "cell"]
        for i, e in enumerate(events):
            if e.get("event") != "park":
                continue
            s = e.get("session")
            back = next((u for u in events[i + 1:]
                         if u.get("event") == "unpark" and u.get("session") == s), None)
            # Each session runs one cell a round; with one round, its cell is
            # the one that brought it back and checked every byte.
            check = next((c for c in cells if c.get("session") == s), None)
            print(json.dumps({
                "tier": e.get("tier"), "variant": variant, "session": s, "bytes": e.get("bytes"),
                "park_s": e.get("seconds"), "unpark_s": back.get("seconds") if back else None,
                "bit_exact": check.get("bit_exact") if check else None,
                "same_address": check.get("same_address") if check else None}))
        parked = {r["id"] for r in run if r.get("event") == "session" and
                  r.get("parking") == "parked"}
        for r in run:
            if r.get("event") == "gpu_memory" and r.get("session") in parked:
                base = ctx.get("context_after_matmul_mib")
                print(json.dumps({
                    "what": "gpu_memory_while_parked", "variant": variant,
                    "session": r["session"], "used_mib": r.get("used_mib"),
                    "bare_context_mib": ctx.get("bare_context_mib"),
                    "context_after_matmul_mib": base,
                    "over_context_mib": r["used_mib"] - base if base is not None else None}))
        bad = [c for c in cells if c.get("bit_exact") is False or c.get("same_address") is False]
        print(json.dumps({"what": "cells", "variant": variant, "cells": len(cells),
                          "all_bit_exact_same_address": bool(cells) and not bad}))


if __name__ == "__main__":
    main(sys.argv[1])
