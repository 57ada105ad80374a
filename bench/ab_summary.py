#!/usr/bin/env python3
"""bench/ab_summary.py - the hook's in-process cost from the evaluation's
A/B (cost_ab.csv, written by `bench/eval/run.sh cost`): per workload, the
rounds' on/off - 1 as median, mean with its 95 % confidence interval, and
pooled (all on time over all off time).

    python3 bench/ab_summary.py RESULTS_DIR...

Standard library only.  bench/results/burst-watch-2026-12-04/README.md
quotes its output.
"""
import collections
import csv
import math
import os
import statistics
import sys


def summarise(path):
    rows = list(csv.DictReader(open(os.path.join(path, "cost_ab.csv"))))
    by = collections.defaultdict(list)
    for r in rows:
        by[r["workload"]].append(r)
    out = []
    for workload, rs in by.items():
        ratio = [float(r["on_ms"]) / float(r["off_ms"]) - 1 for r in rs]
        ci = 1.96 * statistics.stdev(ratio) / math.sqrt(len(ratio)) if len(ratio) > 1 else math.nan
        pooled = sum(float(r["on_ms"]) for r in rs) / sum(float(r["off_ms"]) for r in rs) - 1
        off = statistics.median(float(r["off_ms"]) for r in rs)
        out.append((workload, len(ratio), statistics.median(ratio), statistics.mean(ratio), ci,
                    pooled, off))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: ab_summary.py RESULTS_DIR...")
    for path in sys.argv[1:]:
        print(path)
        print("  %-16s %6s %9s %17s %9s %9s" % ("workload", "rounds", "median", "mean +/- 95% CI",
                                                "pooled", "off ms"))
        for w, n, med, mean, ci, pooled, off in summarise(path):
            print("  %-16s %6d %+8.2f%% %+7.2f +/- %5.2f%% %+8.2f%% %9.3f" %
                  (w, n, 100 * med, 100 * mean, 100 * ci, 100 * pooled, off))


if __name__ == "__main__":
    main()
