"""Kernel bursts (Gemini): the hook measures how long the process keeps the
GPU busy at a stretch, with events its monitor thread records and waits for,
merges bursts separated by less than GPUSHARE_BURST_MERGE_US, and sends the
90th percentile and the last of its recent bursts with each acquire.  A
release says how long the grant was held and how far past its quantum.

Kernels on the simulated GPU run exactly as long as asked, and the
simulator's execution log says when each ran.  A burst is measured from the
submission of its first work (inside the launch call: after the probe's
"launching" line, before its "launched" line) to the GPU's timestamp of its
end (after the kernel's end in the log, and before the hook has finished
measuring: before the probe's next "bursts" line, which waits for that).
Those events bound every measurement, however loaded the machine: a monitor
thread that runs late measures a longer burst, and the bound grows with it.
Where a test needs two bursts apart, the probe waits for the first to be
measured before it pauses, so a late monitor cannot merge them."""
import os

import pytest

from gstest import kernels

# The GPU timestamps reach CLOCK_MONOTONIC through a reference event whose
# host time the hook knows within a few us: the slack of the lower bound (us).
TOL_US = 2000

pytestmark = pytest.mark.fake_broker(auto_grant=True)


class Expected:
    """The bounds of the burst from the launch of kernel `first` to the end
    of the last of `first` and `names` in the simulator's log, measured by
    the time of `done` (ns: a "bursts" line after it)."""

    def __init__(self, p, sim, first, *names, done):
        end = max(k["end_ns"] for n in (first,) + names for k in kernels(sim, n))
        self.lo = (end - p.time_of("launched " + first)) / 1000 - TOL_US
        self.hi = (done - p.time_of("launching " + first)) / 1000

    def __repr__(self):
        return "[%.0f, %.0f] us" % (self.lo, self.hi)


def why(p):
    """With GS_HOOK_DEBUG set: what the hook's monitor logged (printed, so
    that pytest shows all of it)."""
    if not os.environ.get("GS_HOOK_DEBUG"):
        return ""
    text = "\n".join([line for line in p.stderr().splitlines()
                      if "burst" in line or "probe GPU" in line] +
                     [line for line in p.lines if line and "launch" in line])
    print(text)
    return "(see stdout)"


def near(measured_us, e):
    ok = e.lo <= measured_us <= e.hi
    if not ok:
        print("measured %d us, expected %r" % (measured_us, e))
    return ok


def bursts(p):
    """The probe's next 'bursts' line: (found, p90_us, last_us, t_ns)."""
    fields, t = p.expect("bursts")
    return int(fields[1]) == 0, int(fields[2]), int(fields[3]), t


def test_bursts_arrive_with_the_next_acquire(fb, probe, sim):
    # a 20 ms burst, a pause, then 30 + 10 ms back to back: one 40 ms burst
    p = probe(["init", "launch", "L", "20000", "k1", "sync", "bursts", "sleep", "60",
               "launch", "L", "30000", "k2", "launch", "L", "10000", "k3", "sync", "bursts",
               "wait", "launch", "L", "1000", "kafter", "sync", "end"])
    bursts(p)
    _, _, _, done = bursts(p)
    p.expect("wait")
    first = fb.messages("acquire")[0]["msg"]
    assert "burst_p90_us" not in first and "burst_last_us" not in first  # nothing measured yet
    grant = fb.messages("grant", direction="out")[0]
    fb.revoke(grant)
    fb.wait_for("release")
    n = fb.count()
    p.go()
    acq = fb.wait_for("acquire", after=n)["msg"]
    assert p.wait() == 0
    second = Expected(p, sim, "k2", "k3", done=done)
    assert second.lo + TOL_US >= 40000
    assert near(acq["burst_last_us"], second), (acq, second)
    assert near(acq["burst_p90_us"], second), (acq, second)  # of [20 ms, 40 ms]: the larger


def test_p90_and_last_of_the_window(fb, probe, sim):
    # nine 20 ms bursts and a 5 ms one: p90 is about 20 ms, the last 5 ms
    steps = ["init"]
    for i in range(9):
        steps += ["launch", "L", "20000", "k%d" % i, "sync", "bursts", "sleep", "30"]
    steps += ["launch", "L", "5000", "klast", "sync", "bursts", "end"]
    p = probe(steps)
    done = [bursts(p) for _ in range(10)]
    assert p.wait() == 0
    each = [Expected(p, sim, "k%d" % i, done=done[i][3]) for i in range(9)]
    for e, (found, _, last, _) in zip(each, done):
        assert found and near(last, e), (last, e, why(p))
    found, p90, last, t = done[9]
    assert found
    assert min(e.lo for e in each) <= p90 <= max(e.hi for e in each), (p90, each, why(p))
    assert near(last, Expected(p, sim, "klast", done=t)), last


def test_bursts_closer_than_the_threshold_merge(fb, probe, sim):
    # A 5 ms pause with a 200 ms threshold: one burst, the pause in it (the
    # probe would have to be held up 195 ms for it to come apart).
    p = probe(["init", "launch", "L", "10000", "ka", "sync", "sleep", "5",
               "launch", "L", "10000", "kb", "sync", "bursts", "end"],
              GPUSHARE_BURST_MERGE_US=200000)
    found, p90, last, done = bursts(p)
    assert p.wait() == 0
    assert found and last >= 25000  # the pause is part of the burst
    assert near(last, Expected(p, sim, "ka", "kb", done=done)), (last, why(p))


def test_bursts_further_apart_than_the_threshold_do_not_merge(fb, probe, sim):
    # ka is measured before the 300 ms pause begins (a late monitor cannot
    # stretch it into kb's), and the pause is longer than the threshold.
    p = probe(["init", "launch", "L", "10000", "ka", "sync", "bursts", "sleep", "300",
               "launch", "L", "10000", "kb", "sync", "bursts", "end"],
              GPUSHARE_BURST_MERGE_US=200000)
    _, _, _, done_a = bursts(p)
    found, p90, last, done_b = bursts(p)
    assert p.wait() == 0
    assert found and near(last, Expected(p, sim, "kb", done=done_b)), (last, why(p))
    ka = Expected(p, sim, "ka", done=done_a)
    assert p90 <= max(ka.hi, last), (p90, ka, why(p))  # the larger of the two


def test_default_threshold_keeps_real_pauses_apart(fb, probe, sim):
    p = probe(["init", "launch", "L", "10000", "ka", "sync", "bursts", "sleep", "20",
               "launch", "L", "10000", "kb", "sync", "bursts", "end"])
    bursts(p)
    found, _, last, done = bursts(p)
    assert p.wait() == 0
    assert found and near(last, Expected(p, sim, "kb", done=done)), (last, why(p))


def test_work_on_several_streams_is_one_burst(fb, probe, sim):
    # two streams, the engine runs one kernel at a time: 25 ms of activity
    p = probe(["init", "stream", "stream", "launch", "0", "15000", "ka", "launch", "1", "10000",
               "kb", "sync", "bursts", "end"])
    found, _, last, done = bursts(p)
    assert p.wait() == 0
    assert last >= 25000
    assert found and near(last, Expected(p, sim, "ka", "kb", done=done)), (last, why(p))


def test_a_long_burst_with_many_launches(fb, probe, sim):
    # a 20 ms kernel, then 40 kernels of 1 ms queued behind it: the monitor
    # probes many times meanwhile, and it all is one burst (as long as the
    # simulator took to run them)
    steps = ["init", "launch", "L", "20000", "kfirst"]
    for i in range(40):
        steps += ["launch", "L", "1000", "k%d" % i]
    steps += ["sync", "bursts", "end"]
    p = probe(steps)
    found, _, last, done = bursts(p)
    assert p.wait() == 0
    want = Expected(p, sim, "kfirst", *["k%d" % i for i in range(40)], done=done)
    assert found and near(last, want), (last, want, why(p))


def test_a_program_that_keeps_submitting_is_watched_not_probed(fb, probe, sim):
    # 120 kernels of 100 us, 300 us of host time apart: the GPU idles
    # between them (longer than the 100 us merge threshold), but the program
    # never stops submitting for a whole pause (1 ms or more), so its burst
    # goes on and the monitor calls the driver only once it stops.  A probe
    # costs a launch loop 10-30 us on an H200; probing every 1-4 ms, the
    # monitor cost launch-bound PyTorch steps 0.7-1 %.
    p = probe(["init", "trickle", "120", "100", "300", "sync", "bursts", "end"],
              GPUSHARE_LOG="debug")
    found, _, last, done = bursts(p)
    assert p.wait() == 0
    probes = [line for line in p.stderr().splitlines() if "probe GPU 0: recorded" in line]
    ks = kernels(sim, "ktrickle")
    span_us = (ks[-1]["end_ns"] - ks[0]["start_ns"]) / 1000
    assert len(ks) == 120 and span_us >= 36000
    # A loaded machine can stop the program for a whole pause (1 ms or
    # more): the monitor may then probe, and end the burst if the GPU is
    # idle, as it should.  Such stalls show as GPU idle gaps of 1 ms or
    # more; the burst that must be one runs from the last of them.
    stalls = [i + 1 for i in range(len(ks) - 1) if ks[i + 1]["start_ns"] - ks[i]["end_ns"] >= 1e6]
    tail = ks[stalls[-1]:] if stalls else ks
    tail_us = (tail[-1]["end_ns"] - tail[0]["start_ns"]) / 1000
    assert len(probes) <= 4 + len(stalls), (len(probes), stalls, why(p))
    assert found and last >= 0.8 * tail_us, (last, tail_us, stalls, why(p))  # gaps in one burst
    assert last <= (done - p.time_of("launching ktrickle")) / 1000


def test_captured_work_is_no_burst_until_the_graph_runs(fb, probe, sim):
    p = probe(["init", "stream", "capture_begin", "0", "launch", "0", "15000", "kcap",
               "capture_end", "0", "bursts",
               "graph_launch", "0", "sync", "bursts", "end"])
    found, _, _, before = bursts(p)
    assert not found, "a capture was counted as GPU activity"
    found, _, last, done = bursts(p)
    assert p.wait() == 0
    # the graph's launch starts it, after the first "bursts" line; it lasts
    # at least as long as its kernel
    (k,) = kernels(sim, "kcap")
    e = Expected(p, sim, "kcap", done=done)
    e.lo = (k["end_ns"] - k["start_ns"]) / 1000 - TOL_US
    e.hi = (done - before) / 1000
    assert found and near(last, e), (last, e, why(p))


def test_no_bursts_without_a_broker(probe, endpoint):
    p = probe(["init", "launch", "L", "5000", "sync", "sleep", "20", "bursts", "end"])
    found, _, _, _ = bursts(p)
    assert not found  # ungated: nothing to report them to
    assert p.wait() == 0


def test_release_reports_use_and_overuse(fb, probe):
    fb.quantum_us = 20000
    p = probe(["init", "launch", "L", "80000", "klong", "wait", "end"])
    p.expect("wait")
    grant = fb.messages("grant", direction="out")[0]
    assert grant["msg"]["quantum_us"] == 20000
    fb.revoke(grant)
    rel = fb.wait_for("release")
    used = rel["msg"]["used_us"]
    assert 70000 <= used <= (rel["t"] - grant["t"]) / 1000, rel  # the drain waited for klong
    assert rel["msg"]["overuse_us"] == used - 20000
    p.go()
    assert p.wait() == 0


def test_release_without_quantum_reports_no_overuse(fb, probe):
    p = probe(["init", "launch", "L", "30000", "wait", "end"])
    p.expect("wait")
    grant = fb.messages("grant", direction="out")[0]
    fb.revoke(grant)
    rel = fb.wait_for("release")["msg"]
    assert rel["overuse_us"] == 0 and rel["used_us"] > 0
    p.go()
    assert p.wait() == 0
