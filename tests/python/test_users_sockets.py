"""The system broker's sockets between real users (issue 34, items 1, 3
and 8): who may connect to the pool socket (pool.sock, where a parked
process fetches its host memory) and what each may fetch there, and how
many connections one user may hold on it and on the broker's own socket
while others still get theirs.  As ordinary accounts (gsusers.py) through
a system broker with a socket group; skipped unless run as root."""
import grp
import json
import os
import socket
import stat
import subprocess

import pytest

import gstest
import gsusers
from gstest import MIB, entry
from gsusers import ALICE, BOB, MALLORY

pytestmark = gsusers.needs_root

CHUNK = 4 * MIB


class Program(gstest.Proc):
    """gpuworker.py in command mode as `user`, outside Jupyter (no launcher:
    on the swap tier its own hook says when it needs the GPU again), its
    hook swapping through the broker's pool socket."""

    def __init__(self, user, name, b, sim, tmp_path):
        env = gsusers.env_of(user, gstest.hook_env(sim, b.endpoint, GPUSHARE_SWAP="on",
                                                   GPUSHARE_SESSION=name))
        argv = gsusers.argv_as(user, [gstest.PYTHON, gstest.WORKER, "commands"])
        super().__init__(argv, env, tmp_path, name, bufsize=1)

    def command(self, line, timeout=60):
        self.send(line)
        return self.expect("", timeout).strip()


@pytest.fixture
def swap_system(tmp_path):
    """A system broker (socket group gs-users) on a 100 MiB simulated GPU
    shared by all users, whose host pool pins CHUNK-sized chunks; yields
    (broker, program(user, name))."""
    sim = gsusers.shared_sim(memory="100M", extra={"GPUSHARE_SIM_CONCURRENCY": "4",
                                                   "GPUSHARE_POOL_CHUNK": str(CHUNK)})
    b = gsusers.system_broker(sim, ["--set", "park_idle_s=0"], event_log=True).start()
    made = []

    def program(user, name):
        p = Program(user, name, b, sim, tmp_path)
        made.append(p)
        return p
    yield b, program
    for p in made:
        p.kill()
    b.stop()
    gstest.unlink_sim(sim)


def pool_path(b):
    return os.path.join(os.path.dirname(b.endpoint[len("ipc://"):]), "pool.sock")


def pinned(b):
    pools = b.status()["parking"].get("pool") or [{}]
    return pools[0].get("pinned_bytes", 0)


def park_alice(b, program, seed):
    """alice's program holds 60 MiB (pattern seed), bob's 20 MiB; bob's next
    30 MiB parks alice on the swap tier: her hook fetched her lease from the
    pool socket, as gs-alice.  Returns (alice, bob)."""
    a, c = program(ALICE, "alice-p"), program(BOB, "bob-c")
    assert a.command("alloc x %d" % (60 * MIB)) == "ok", a.stderr()
    assert a.command("fill x %d" % seed) == "ok"
    assert c.command("alloc y %d" % (20 * MIB)) == "ok", c.stderr()
    assert c.command("fill y %d" % (seed + 100)) == "ok"
    gstest.wait_until(lambda: entry(b.status(), "alice-p") and entry(b.status(), "bob-c"),
                      what="both programs to join")
    gstest.wait_until(lambda: pinned(b) >= 60 * MIB, what="the pool to pin 60 MiB",
                      interval=0.05)
    assert c.command("alloc z %d" % (30 * MIB)) == "ok", "%s\n%s" % (c.stderr(), b.log())
    e = entry(b.status(), "alice-p")
    assert e["parking"] == "parked" and e["park_tier"] == "swap", (e, a.stderr(), b.log())
    return a, c


def unpark_alice(b, a, seed):
    """alice's next call brings her back from the pool (bob, idle, goes
    out to make room), bit-exact."""
    assert a.command("check x %d" % seed) == "ok", "%s\n%s" % (a.stderr(), b.log())
    e = entry(b.status(), "alice-p")
    assert e["parking"] == "resident" and e["unparks"] >= 1, e


# ---- 1: the pool socket is the socket group's, as the broker's ------------


def test_the_pool_socket_has_the_brokers_group_and_mode(swap_system):
    b, _ = swap_system
    for path in (b.endpoint[len("ipc://"):], pool_path(b)):
        st = os.stat(path)
        assert stat.S_ISSOCK(st.st_mode), path
        assert stat.S_IMODE(st.st_mode) == 0o660, (path, oct(st.st_mode))
        assert st.st_uid == 0 and st.st_gid == grp.getgrnam(gsusers.GROUP).gr_gid, path


def test_a_users_park_goes_to_host_memory_and_comes_back(swap_system):
    """Was: "swap out: pool socket ...: Permission denied", and bob's
    allocation failed with CUDA_ERROR_OUT_OF_MEMORY."""
    b, program = swap_system
    a, c = park_alice(b, program, 7)
    unpark_alice(b, a, 7)
    assert entry(b.status(), "bob-c")["park_tier"] == "swap"  # bob fetched his, too
    assert c.command("check y 107") == "ok", c.stderr()  # and brings it back
    assert "Permission denied" not in b.log()


FETCH_ALL = r"""
import array, json, socket, sys
path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for lease in range(first, last + 1):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(path)
    s.send(json.dumps({"lease": lease}).encode())
    msg, anc, _, _ = s.recvmsg(512, socket.CMSG_SPACE(64 * 4))
    fds = sum(len(data) // 4 for level, kind, data in anc
              if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS)
    print(lease, fds, msg.decode(), flush=True)
    s.close()
"""


def test_a_user_cannot_fetch_another_users_lease(swap_system):
    """The pool hands a lease only to the process it was made for (the
    peer's pid and uid from the kernel): mallory, asking for every lease
    while alice's memory is out, gets none of it, and the same answer for
    alice's lease as for one that does not exist."""
    b, program = swap_system
    a, _ = park_alice(b, program, 8)
    r = gsusers.run(MALLORY, [gstest.PYTHON, "-c", FETCH_ALL, pool_path(b), "1", "64"],
                    env=gsusers.env_of(MALLORY, b.env))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 64
    for line in lines:
        lease, fds, answer = line.split(" ", 2)
        assert fds == "0", line
        assert json.loads(answer) == {"error": "no lease %s for this process" % lease,
                                      "retry": False}, line
    unpark_alice(b, a, 8)  # her lease was hers all along


# ---- 3: idle pool connections of one user -----------------------------------

# Holds n connections to the pool socket, saying nothing, and opens a new
# one whenever the broker closes one (as a hostile user keeps a socket's
# slots taken); prints "holding N" once all are open, and on each line of
# stdin how many refusals (with the broker's reason) it read.
HOLD_POOL = r"""
import select, socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    return s
held = [conn() for _ in range(n)]
print("holding", len(held), flush=True)
refusals = 0
while True:
    r, _, _ = select.select(held + [sys.stdin], [], [], 1)
    if sys.stdin in r:
        if not sys.stdin.readline():
            break
        print("refusals", refusals, flush=True)
    for s in r:
        if s is sys.stdin:
            continue
        try:
            msg = s.recv(512)
        except OSError:
            msg = b""
        refusals += b"busy" in msg or b"no request" in msg
        held.remove(s)
        s.close()
        held.append(conn())
    time.sleep(0.01)
"""


def test_idle_pool_connections_of_one_user_do_not_stop_anothers_park(swap_system, tmp_path):
    """mallory keeps 40 connections to the pool socket open, idle, opening
    another whenever one is closed.  It had 32 slots, held for 2 s each:
    alice's hook read a broken pipe and her park failed.  Now mallory holds
    8 at most, the rest are refused with the reason, silent ones go after
    0.5 s, and alice's park and unpark go through."""
    b, program = swap_system
    env = gsusers.env_of(MALLORY, b.env)
    argv = gsusers.argv_as(MALLORY, [gstest.PYTHON, "-c", HOLD_POOL, pool_path(b), "40"])
    m = gstest.Proc(argv, env, tmp_path, "mallory-hold", bufsize=1)
    try:
        m.wait_line("holding 40")
        a, _ = park_alice(b, program, 9)
        unpark_alice(b, a, 9)
        m.send("")
        refusals = int(m.expect("refusals").split()[1])
        assert refusals > 0, "the broker refused none of mallory's connections with a reason"
    finally:
        m.kill()


# ---- 8: connections to the broker's socket ----------------------------------

# Holds n connections to the broker's socket (raw, saying nothing: libzmq
# accepts them all the same); "holding N" once all are open.
HOLD_BROKER = r"""
import socket, sys
path, n = sys.argv[1], int(sys.argv[2])
held = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    held.append(s)
print("holding", len(held), flush=True)
sys.stdin.read()
"""


def status_as(user, b):
    """`gpushare status` as user: (exit status, stderr)."""
    argv = [gstest.CLI, "--broker", b.endpoint, "status"]
    if user == "root":
        r = subprocess.run(argv, env=b.env, capture_output=True, text=True, timeout=60)
    else:
        r = gsusers.run(user, argv, env=gsusers.env_of(user, b.env))
    return r.returncode, r.stderr


def test_one_users_broker_connections_leave_room_for_others_and_root(tmp_path):
    """The broker under a low open-file limit (256: 128 connections): mallory
    holding 300 connections left nobody any (`gpushare status`: no reply
    within 2000 ms, for root too), as the per-uid cap (256) was larger than
    the room.  Now one user holds at most a quarter of the users' room, an
    eighth is kept for root, and alice and root are answered at once.
    (Where the broker may raise its limit, the room is larger and the cap
    256: the same holds.)"""
    sim = gsusers.shared_sim(memory="1G")
    b = gsusers.system_broker(sim)
    b.cmd = ["/bin/sh", "-c", 'ulimit -n 256 && exec "$0" "$@"', gstest.BROKER, "-v"]
    b.start()
    path = b.endpoint[len("ipc://"):]
    argv = gsusers.argv_as(MALLORY, [gstest.PYTHON, "-c", HOLD_BROKER, path, "300"])
    m = gstest.Proc(argv, gsusers.env_of(MALLORY, b.env), tmp_path, "mallory-hold", bufsize=1)
    try:
        m.wait_line("holding 300")
        st = b.status()["connections"]
        assert st["max_per_uid"] <= (st["max_total"] - st["reserved_for_root"]) // 4, st
        assert st["reserved_for_root"] >= st["max_total"] // 8, st
        # Refused, then closed (after a second's grace for their answer):
        # mallory keeps her cap's worth, beside root's own status query.
        gstest.wait_until(lambda: b.status()["connections"]["open"] <= st["max_per_uid"] + 2,
                          what="the broker to close mallory's connections over her cap")
        assert b.status()["connections"]["refused"] >= 300 - st["max_per_uid"]
        for user in (ALICE, "root"):
            rc, err = status_as(user, b)
            assert rc == 0, (user, err)
        # mallory's own next one is refused, and says so.
        rc, err = status_as(MALLORY, b)
        assert rc != 0 and "max_connections_per_uid" in err, err
        assert "more than max_connections_per_uid" in b.log()
    finally:
        m.kill()
        b.stop()
        gstest.unlink_sim(sim)
