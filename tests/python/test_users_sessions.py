"""Sessions between users (issue 34, items 5 to 7), with real accounts
(gsusers.py) on a system broker: a session's name belongs to its user, so
nobody can place, take or pre-claim another user's session by naming it; a
hello cannot make the broker grow or flood its log; a join the broker
refuses never runs ungated; and what users name their notebooks reaches
nobody's terminal as control characters."""
import json
import os
import subprocess
import time

import pytest

import gstest
import gsusers
from fakebroker import FakeBroker
from gsusers import ALICE, MALLORY

# A process of a session that looks at the GPUs and goes: where the broker
# placed it (the hook sets CUDA_VISIBLE_DEVICES at load, from its hello).
LOOK = ("import ctypes, os; ctypes.CDLL('libcuda.so.1').cuInit(0); "
        "print(os.environ.get('CUDA_VISIBLE_DEVICES'))")

# Sends the JSON messages of argv[2:] (one DEALER, in order), prints each
# answer as a line, then waits for a line on stdin (so that what it
# registered stays: a session whose registrar is gone ends).
RAW = r"""
import json, sys, zmq
s = zmq.Context().socket(zmq.DEALER)
s.setsockopt(zmq.RCVTIMEO, 10000)
s.connect(sys.argv[1])
for i, m in enumerate(sys.argv[2:]):
    m = dict(json.loads(m), v=1, seq=i + 1)
    s.send(json.dumps(m).encode())
    print(s.recv().decode(), flush=True)
sys.stdin.readline()
"""

# Hellos asking to place sessions of junk names, as fast as they are
# answered (in windows of 500): n, then "done".
STORM = r"""
import json, sys, zmq
s = zmq.Context().socket(zmq.DEALER)
s.setsockopt(zmq.RCVTIMEO, 20000)
s.connect(sys.argv[1])
n = int(sys.argv[2])
for base in range(0, n, 500):
    k = min(500, n - base)
    for i in range(base, base + k):
        s.send(json.dumps({"v": 1, "type": "hello", "seq": i + 1, "role": "hook", "pid": 1,
                           "session": "junk-%d" % i, "place": True}).encode())
    for _ in range(k):
        assert json.loads(s.recv())["type"] == "welcome"
print("done", flush=True)
"""

pytestmark = gsusers.needs_root


def system(extra=None, args=()):
    """A system broker on a simulated GPU (or several) all users share."""
    sim = gsusers.shared_sim(memory="1G", extra=extra)
    return gsusers.system_broker(sim, args=args, event_log=True).start(), sim


def raw(user, b, *msgs):
    """RAW as user: (its answers, the process still waiting on stdin)."""
    p = gsusers.popen(user, [gstest.PYTHON, "-c", RAW, b.endpoint] +
                      [json.dumps(m) for m in msgs], env=gsusers.env_of(user, b.env),
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    answers = [json.loads(p.stdout.readline()) for _ in msgs]
    return answers, p


def done(p):
    p.stdin.close()
    p.wait(30)


def look(user, b, sim, session):
    """The GPUs (UUIDs) a process of user's session `session` is given."""
    env = gsusers.env_of(user, gstest.hook_env(sim, b.endpoint, GPUSHARE_SESSION=session))
    # The hook is preloaded after setpriv: loaded into setpriv itself, it
    # would ask the broker as root, before setpriv becomes the user.
    preload = env.pop("LD_PRELOAD")
    r = gsusers.run(user, ["env", "LD_PRELOAD=" + preload, gstest.PYTHON, "-c", LOOK], env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(",")


def sessions_named(b, name):
    """{user: status entry} of the sessions called name (on GPU 0)."""
    return {s["user"]: s for s in b.status()["gpus"][0]["sessions"] if s.get("name") == name}


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


# ---- 5: placement is the owner's ----------------------------------------------


def test_mallory_cannot_place_alices_session(tmp_path):
    """The audit's mallory sent a hello placing alice's session (first, on
    every GPU: a gang that waits for all four).  A hello names a session of
    the sender's own: he placed his, alice's is hers."""
    b, sim = system(extra={"GPUSHARE_SIM_DEVICES": "4"})
    try:
        gpus = [g["uuid"] for g in b.status()["gpus"]]
        hello = {"type": "hello", "role": "hook", "pid": 1, "session": "nb-alice",
                 "place": True, "gpus": 4}
        (w,), p = raw(MALLORY, b, hello)
        done(p)
        assert w["type"] == "welcome" and sorted(w["devices"]) == sorted(gpus), w
        mine = look(ALICE, b, sim, "nb-alice")
        assert len(mine) == 1 and mine[0] in gpus, mine  # her own placement, one GPU
        # Her session exists now, placed; his hello again changes nothing of it.
        (w,), p = raw(MALLORY, b, dict(hello, gpus=1))
        done(p)
        assert look(ALICE, b, sim, "nb-alice") == mine
        uid = gsusers.uid(ALICE)
        placed = [e for e in b.synced_events("placed") if e["session"] == "nb-alice@%d" % uid]
        assert len(placed) == 1 and placed[0]["devices"] == mine, b.synced_events("placed")
    finally:
        b.stop()
        gstest.unlink_sim(sim)


def test_junk_hello_storm_neither_grows_the_broker_nor_floods_its_log(tmp_path):
    """100 000 hellos with junk ids grew the broker by 47 MB, never freed,
    and wrote 100 000 log lines.  Placements that no session took are
    capped per uid (session_place.h), and the lines any user's messages
    cause are limited per uid (log_limit.h)."""
    n = 100000
    b, sim = system(extra={"GPUSHARE_SIM_DEVICES": "2"})
    try:
        pid = b.proc.pid
        # Alice placed first: mallory's storm must not take her placement away.
        mine = look(ALICE, b, sim, "train")
        before = vm_rss_kib(pid)
        lines_before = len(b.log().splitlines())
        r = gsusers.run(MALLORY, [gstest.PYTHON, "-c", STORM, b.endpoint, str(n)],
                        env=gsusers.env_of(MALLORY, b.env), timeout=300)
        assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
        grown = vm_rss_kib(pid) - before
        log = b.log().splitlines()[lines_before:]
        placed = [line for line in log if "placed on GPU" in line]
        assert grown < 8 * 1024, "the broker grew by %d KiB for %d hellos" % (grown, n)
        assert len(log) < 1000, "%d log lines for %d hellos:\n%s" % (len(log), n, log[-5:])
        assert placed and any("not logged" in line for line in placed), placed[-3:]
        st = b.status()
        assert st["gpus"], st  # still serving
        assert look(ALICE, b, sim, "train") == mine
    finally:
        b.stop()
        gstest.unlink_sim(sim)


# ---- 6: names belong to their user ---------------------------------------------


def test_mallorys_train_does_not_stop_alices_train_from_running_gated(tmp_path):
    """mallory holding a session named train made alice's `gpushare run
    --name train` run ungated (its join refused).  Now each user's train is
    their own session: alice's waits for the GPU while mallory's holds it
    (exclusive), and status shows both, each under its user."""
    b, sim = system(args=("--policy", "exclusive"))
    procs = []

    def run_as(user, label):
        env = gsusers.env_of(user, gstest.hook_env(sim, b.endpoint))
        argv = gsusers.argv_as(user, [gstest.CLI, "run", "--name", "train", "--", gstest.PYTHON,
                                      gstest.WORKER, "loop", "2000", label])
        p = gstest.Proc(argv, env, tmp_path, label)
        procs.append(p)
        return p

    try:
        held = run_as(MALLORY, "mallory")
        held.wait_line("first")
        alice = run_as(ALICE, "alice")
        s = gstest.wait_until(
            lambda: sessions_named(b, "train").get(ALICE, {}).get("state") == "waiting" and
            sessions_named(b, "train"), what="alice's train waiting for the GPU")
        assert set(s) == {ALICE, MALLORY}, s
        assert s[ALICE]["id"] == "train@%d" % gsusers.uid(ALICE)
        assert s[MALLORY]["state"] == "running" and held.pid in s[MALLORY]["pids"]
        assert alice.pid in s[ALICE]["pids"]
        assert not alice.printed("first")  # gated: it waits its turn
        assert "without GPU sharing" not in alice.stderr(), alice.stderr()
        r = gsusers.run(ALICE, [gstest.CLI, "--broker", b.endpoint, "status"],
                        env=gsusers.env_of(ALICE, b.env))
        rows = [line.split() for line in r.stdout.splitlines() if line.split()[:1] == ["train"]]
        assert sorted(row[1] for row in rows) == sorted([ALICE, MALLORY]), r.stdout
        held.kill()
        alice.wait_line("first")  # her turn came
    finally:
        for p in procs:
            p.kill()
        b.stop()
        gstest.unlink_sim(sim)


class RefusingBroker(FakeBroker):
    """Welcomes, and answers join with an error while refuse is set."""
    refuse = True

    def _answer(self, ident, msg):
        if msg.get("type") == "join" and self.refuse:
            self._send_now(ident, {"v": 1, "type": "error", "code": "permission_denied",
                                   "message": "the session belongs to another user",
                                   "request_type": "join", "seq": msg.get("seq")})
            return
        super()._answer(ident, msg)


def test_a_refused_join_never_runs_ungated(probe, endpoint):
    """A broker that answers and refuses the join: the hook's work waits
    (the gate stays closed, never ungated), it says why, and it asks
    again; once the broker takes it, it runs under a grant."""
    b = RefusingBroker(endpoint).start()
    try:
        p = probe(["init", "launch", "L", "1000", "kfirst", "sync", "end"],
                  GPUSHARE_SESSION="train")
        first = b.wait_for("join")
        b.wait_for("join", since=first["t"], timeout=30)  # asked again
        assert not p.printed("launched kfirst"), "a refused process ran"
        gstest.wait_for_text(p.stderr, "refused this process", 10)
        assert "without GPU sharing" not in p.stderr(), p.stderr()
        assert p.stderr().count("does not run unscheduled") == 1, p.stderr()  # said once
        t0 = time.monotonic_ns()
        b.refuse = False
        joined = b.wait_for("join", since=t0, timeout=30)
        # (a refused connection asked too, between its welcome and the refusal)
        acq = b.wait_for("acquire", since=joined["t"], timeout=30)
        g = b.grant(acq)
        _, t = p.expect("launched kfirst CUDA_SUCCESS")
        assert t >= g["t"], "ran before its grant"
        assert p.wait() == 0
    finally:
        b.stop()


# ---- 7: control characters ------------------------------------------------------


def test_control_characters_in_a_notebook_name_are_shown_escaped(tmp_path):
    """A notebook named with a newline and an escape sequence reached
    `gpushare status` and `top` raw: a forged row, red text.  The broker
    replaces control characters where they arrive; the CLI again."""
    b, sim = system()
    evil = "evil\nGPU 7  FORGED row\x1b[31mred\x9b2J.ipynb"
    shown = "evil?GPU 7  FORGED row?[31mred?2J.ipynb"
    (r,), p = raw(MALLORY, b, {"type": "register", "kernel_id": "k-evil", "pid": os.getpid(),
                               "user": "root\x1b[0m\n", "notebook": evil})
    try:
        assert r["type"] == "registered" and r["session"] == "k-evil", r
        (e,) = [s for s in b.status()["gpus"][0]["sessions"] if s.get("name") == "k-evil"]
        assert e["notebook"] == shown and e["claimed_user"] == "root?[0m?", e
        env = gsusers.env_of(ALICE, b.env)
        for argv in (["status"], ["top", "--once"]):
            out = gsusers.run(ALICE, [gstest.CLI, "--broker", b.endpoint] + argv, env=env)
            assert out.returncode == 0, out.stderr
            text = out.stdout
            assert "\x1b" not in text and "\x9b" not in text, repr(text)
            assert not any(line.startswith("GPU 7") for line in text.splitlines()), text
            assert shown in text, text
        ev = [x for x in b.synced_events("register") if x["session"].startswith("k-evil")]
        assert ev and ev[0]["notebook"] == shown, ev
    finally:
        done(p)
        b.stop()
        gstest.unlink_sim(sim)
