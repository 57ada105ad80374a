#!/usr/bin/env python3
"""bench/sched_bounds.py - what any scheduler can do for the evaluation's
"scale" workload (issue 17): N mostly idle notebooks, each thinking for an
exponential time (mean --gap s) and then running a cell of log-uniform
20-400 ms of GPU work, one GPU, no overheads at all.  Prints the cells'
slowdown (latency over the work alone) under five disciplines:

  fifo  one cell at a time in arrival order (gpushare's boost until issue 17)
  ps    processor sharing (the driver's time slicing between contexts)
  las   least attained service first (preemptive, no size knowledge)
  srpt  shortest remaining work first (knows every cell's size in advance)
  mlfq  two levels: cells younger than --young-ms first, time slicing within
        each level (no size knowledge; a boost for every new cell)

    python3 bench/sched_bounds.py [--n 8] [--gap 2.0] [--seconds 900] [--seed 17]
    python3 bench/sched_bounds.py --eval-trace [--n 8] [--gap 3.0] [--seconds 60]

--eval-trace replays the very cells of the evaluation's scale section
(bench/eval/eval.py: notebook i of N draws from random.Random(1000 N + i) a
think time, then a cell's units of 0.175 ms, rounded as the notebook does;
a notebook thinks again only after its cell has ended, and starts no cell
past the window) and takes quantiles as eval.py does, so that its p99 is
what the same cells would have had under each discipline with no overheads.

Standard library only; deterministic for a seed.  doc/scheduling.md quotes
its output: without knowing cell sizes (fifo, ps, las, mlfq) the p99 at 45-50 %
offered load stays at 3.6-4.3 x; only size knowledge (srpt) gets it under 3 x.
"""
import argparse
import math
import random


def eval_cells(n, gap, unit_ms=0.175):
    """Per notebook, its (think, size) draws as bench/eval/notebook.py's
    op_random_cells makes them for the scale section (20-400 ms)."""
    lo, hi = max(1, round(20 / unit_ms)), max(1, round(400 / unit_ms))

    def cells(i):
        rng = random.Random(1000 * n + i)
        while True:
            think = rng.expovariate(1.0 / gap)
            units = max(1, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))))))
            yield think, units * unit_ms / 1000

    return [cells(i) for i in range(n)]


def simulate(policy, n, gap, seconds, seed, trace=None, young=0.1):
    rng = random.Random(seed)
    if trace:  # the evaluation's cells: each notebook's own draws, closed loop
        draw = [next(t) for t in trace]
        arrive = [d[0] if d[0] < seconds else math.inf for d in draw]
    else:
        arrive = [rng.expovariate(1 / gap) for _ in range(n)]
    active = {}  # notebook -> [remaining, size, start, attained]
    t, slow, work = 0.0, [], 0.0

    def rates():
        ids = list(active)
        if not ids:
            return {}
        if policy == "ps":
            return {i: 1 / len(ids) for i in ids}
        if policy == "fifo":
            return {min(ids, key=lambda i: active[i][2]): 1.0}
        if policy == "srpt":
            return {min(ids, key=lambda i: active[i][0]): 1.0}
        if policy == "mlfq":
            fresh = [i for i in ids if active[i][3] < young - 1e-12]
            pick = fresh or ids
            return {i: 1 / len(pick) for i in pick}
        low = min(active[i][3] for i in ids)  # las: the least attained share equally
        first = [i for i in ids if active[i][3] <= low + 1e-12]
        return {i: 1 / len(first) for i in first}

    while t < seconds or (trace and active):
        r = rates()
        t_arr, who = min(((arrive[i], i) for i in range(n) if i not in active),
                         default=(math.inf, None))
        t_end, done = math.inf, None
        for i, x in r.items():
            if t + active[i][0] / x < t_end:
                t_end, done = t + active[i][0] / x, i
        t_level = math.inf  # las: the served ones catch up with the next level
        if policy == "las" and r:
            low = min(active[i][3] for i in active)
            above = [active[i][3] for i in active if active[i][3] > low + 1e-12]
            if above:
                t_level = t + (min(above) - low) / next(iter(r.values()))
        if policy == "mlfq":  # a young cell comes of age
            for i, x in r.items():
                if active[i][3] < young - 1e-12:
                    t_level = min(t_level, t + (young - active[i][3]) / x)
        t_next = min(t_arr, t_end, t_level)
        if t_next == math.inf:
            break
        for i, x in r.items():
            active[i][0] -= x * (t_next - t)
            active[i][3] += x * (t_next - t)
        t = t_next
        if t == t_end:
            job = active.pop(done)
            slow.append((t - job[2]) / job[1])
            work += job[1]
            if trace:
                draw[done] = next(trace[done])
                arrive[done] = t + draw[done][0] if t + draw[done][0] < seconds else math.inf
            else:
                arrive[done] = t + rng.expovariate(1 / gap)
        elif t == t_arr:
            size = draw[who][1] if trace else 0.020 * math.exp(rng.uniform(0, math.log(20)))
            active[who] = [size, size, t, 0.0]
    slow.sort()
    if trace:  # eval.py's quantile
        q = lambda p: slow[min(len(slow) - 1, int(p * len(slow)))]
    else:
        q = lambda p: slow[min(len(slow) - 1, int(math.ceil(p * (len(slow) - 1))))]
    return len(slow), work / t, q(0.5), q(0.9), q(0.99)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--gap", type=float, default=None, help="mean think time, s (2; 3 with --eval-trace)")
    ap.add_argument("--seconds", type=float, default=None, help="900; 60 with --eval-trace")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--young-ms", type=float, default=100.0,
                    help="mlfq: how long a cell is young (first level), ms")
    ap.add_argument("--eval-trace", action="store_true",
                    help="the evaluation's own cells (its seeds; defaults --gap 3 --seconds 60)")
    a = ap.parse_args()
    if a.eval_trace:
        a.gap = 3.0 if a.gap is None else a.gap
        a.seconds = 60.0 if a.seconds is None else a.seconds
    else:
        a.gap = 2.0 if a.gap is None else a.gap
        a.seconds = 900.0 if a.seconds is None else a.seconds
    print("%d notebooks, mean think time %.1f s, %.0f s%s" % (
        a.n, a.gap, a.seconds, ", the evaluation's cells" if a.eval_trace else ""))
    print("%-5s %6s %7s %6s %6s %6s" % ("", "cells", "load %", "p50", "p90", "p99"))
    for policy in ("fifo", "ps", "las", "mlfq", "srpt"):
        trace = eval_cells(a.n, a.gap) if a.eval_trace else None
        cells, load, p50, p90, p99 = simulate(policy, a.n, a.gap, a.seconds, a.seed, trace,
                                             a.young_ms / 1000)
        print("%-5s %6d %7.1f %6.2f %6.2f %6.2f" % (policy, cells, 100 * load, p50, p90, p99))


if __name__ == "__main__":
    main()
