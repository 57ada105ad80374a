"""Giving the GPU back: after a revoke the hook stops new work at once,
waits for the work already submitted (on the stream it went to) and only
then answers release; it gives the GPU back unasked when idle; and it never
synchronises while a stream capture is in progress."""

import pytest

from gstest import kernels

BLOCKED_S = 0.3


pytestmark = pytest.mark.fake_broker(auto_grant=True)


@pytest.mark.parametrize("stream", ["L", "P", "0"])
def test_revoke_waits_for_submitted_work_then_releases(fb, probe, sim, stream):
    steps = ["init", "stream", "launch", stream, "300000", "klong", "wait",
             "launch", stream, "1000", "kafter", "sync", "end"]
    p = probe(steps)
    p.expect("launched klong CUDA_SUCCESS")
    p.expect("wait")
    grant = fb.messages("grant", direction="out")[0]
    revoke = fb.revoke(grant, reason="quantum")
    rel = fb.wait_for("release", timeout=5)
    assert rel["msg"]["grant_id"] == grant["msg"]["grant_id"]
    assert rel["msg"]["reason"] == "revoked"
    assert rel["msg"]["device"] == grant["msg"]["device"]
    assert rel["msg"]["used_us"] > 0
    # the release came only once the in-flight kernel had completed ...
    (k,) = kernels(sim, "klong")
    assert k["end_ns"] <= rel["t"], "released while klong was still running"
    assert rel["t"] - revoke["t"] < 2e9
    # ... and new work waits for the next grant
    fb.auto_grant = False
    n = fb.count()
    p.go()
    acq = fb.wait_for("acquire", after=n)
    with pytest.raises(AssertionError):
        p.expect("launched kafter", timeout=BLOCKED_S)
    g = fb.grant(acq)
    p.expect("launched kafter CUDA_SUCCESS")
    assert p.wait() == 0
    (k2,) = kernels(sim, "kafter")
    assert k2["start_ns"] >= g["t"]


def test_revoke_of_idle_holder_is_answered_at_once(fb, probe, sim):
    p = probe(["init", "launch", "L", "1000", "sync", "wait", "end"])
    p.expect("wait")
    grant = fb.messages("grant", direction="out")[0]
    revoke = fb.revoke(grant, reason="cell_idle")
    rel = fb.wait_for("release")
    assert rel["t"] - revoke["t"] < 0.5e9
    p.go()
    assert p.wait() == 0


def test_drain_does_not_wait_for_idle_streams(fb, probe, sim):
    # Two streams, work on one only, and it has completed: the release is
    # prompt (the drain records on the streams that got work, and waits for
    # nothing else).
    p = probe(["init", "stream", "stream", "launch", "0", "1000", "kshort", "ssync", "0", "wait",
               "end"])
    p.expect("wait")
    grant = fb.messages("grant", direction="out")[0]
    revoke = fb.revoke(grant)
    rel = fb.wait_for("release")
    assert rel["t"] - revoke["t"] < 0.5e9
    p.go()
    assert p.wait() == 0


def test_no_synchronisation_while_capturing(fb, probe, sim):
    # klong runs on stream 0; stream 1 captures.  The revoke arrives during
    # the capture: the drain must wait for the capture to end before it
    # synchronises (the simulated driver would invalidate the capture and
    # EndCapture would fail), and the captured launch needs no grant.
    p = probe(["init", "stream", "stream", "launch", "0", "200000", "klong",
               "capture_begin", "1", "wait", "launch", "1", "1000", "kcap", "wait",
               "capture_end", "1", "sync", "end"])
    p.expect("capture_begin CUDA_SUCCESS")
    p.expect("wait")
    grant = fb.messages("grant", direction="out")[0]
    fb.revoke(grant)
    p.go()
    p.expect("launched kcap CUDA_SUCCESS")
    p.expect("wait")
    with pytest.raises(AssertionError):
        fb.wait_for("release", timeout=BLOCKED_S)  # the capture is still open
    p.go()
    _, t_end = p.expect("capture_end CUDA_SUCCESS")
    rel = fb.wait_for("release")
    assert rel["t"] >= t_end
    (k,) = kernels(sim, "klong")
    assert k["end_ns"] <= rel["t"]
    p.expect("sync CUDA_SUCCESS")
    assert p.wait() == 0


def test_stream_destroyed_before_drain(fb, probe, sim):
    p = probe(["init", "stream", "launch", "0", "1000", "kx", "ssync", "0", "destroy", "0", "wait",
               "end"])
    p.expect("destroy CUDA_SUCCESS")
    p.expect("wait")
    grant = fb.messages("grant", direction="out")[0]
    fb.revoke(grant)
    fb.wait_for("release")
    p.go()
    assert p.wait() == 0


def test_destroying_a_capturing_stream_ends_its_capture(fb, probe, sim):
    # Without EndCapture: the drain must not wait for ever for a capture
    # whose stream is gone.
    p = probe(["init", "stream", "capture_begin", "0", "launch", "0", "10", "destroy", "0",
               "launch", "L", "1000", "sync", "wait", "end"])
    p.expect("destroy CUDA_SUCCESS")
    p.expect("wait")
    grant = fb.messages("grant", direction="out")[0]
    fb.revoke(grant)
    fb.wait_for("release")
    p.go()
    assert p.wait() == 0


def test_idle_release_and_reacquire(fb, probe, sim):
    p = probe(["init", "launch", "L", "50000", "kfirst", "wait", "launch", "L", "1000", "ksecond",
               "sync", "end"], GPUSHARE_IDLE_RELEASE_MS=100)
    p.expect("launched kfirst CUDA_SUCCESS")
    p.expect("wait")
    rel = fb.wait_for("release", timeout=3)
    assert rel["msg"]["reason"] == "idle"
    (k,) = kernels(sim, "kfirst")
    assert rel["t"] >= k["end_ns"], "idle release before the work was done"
    grant = fb.messages("grant", direction="out")[0]
    assert rel["t"] - grant["t"] >= 100e6, "released before GPUSHARE_IDLE_RELEASE_MS"
    assert rel["t"] - k["end_ns"] < 1e9, "idle release well under a second"
    n = fb.count()
    p.go()
    fb.wait_for("acquire", after=n)
    p.expect("launched ksecond CUDA_SUCCESS")
    assert p.wait() == 0


def test_busy_program_is_not_idle(fb, probe, sim):
    # launches every 20 ms for 0.4 s with a 100 ms idle threshold: no release
    steps = ["init"]
    for _ in range(20):
        steps += ["launch", "L", "1000", "sleep", "20"]
    steps += ["wait", "end"]
    p = probe(steps, GPUSHARE_IDLE_RELEASE_MS=100)
    p.expect("wait", timeout=10)
    assert not fb.messages("release")
    p.go()
    assert p.wait() == 0
