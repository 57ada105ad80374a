"""The disk tier of parking end to end (issue 37), on the simulated GPU: a
notebook parked on the swap tier for park_disk_idle_s moves on from the
pool's chunks to an image in park_disk_dir (its chunks go back to the
pool), and comes back from there bit-exact when its cell starts; the
image is the broker's (mode 0600) and is removed once the memory is back.
Failures leave the notebook in host memory (disk full) or say what broke
(a corrupted image)."""
import os
import signal
import stat
import subprocess

import pytest

import gstest
from gstest import MIB, entry

CHUNK = 4 * MIB


@pytest.fixture
def disk_notebooks(notebooks, tmp_path):
    """start(*settings) -> (broker, make(name), disk dir): the swap tier's
    notebooks with park_disk_dir set to a fresh directory."""
    def start(*settings):
        d = tmp_path / "disk"
        b, sim, make = notebooks("100M", "park_idle_s=0", "park_disk_dir=%s" % d, *settings,
                                 GPUSHARE_POOL_CHUNK=str(CHUNK))

        def make_swap(name, cells=True):
            return make(name, cells, GPUSHARE_SWAP="on")
        return b, make_swap, d
    return start


def wait_for(b, what, check, timeout=30):
    """check() polled until it holds; the broker's log and a's status when
    it never does."""
    try:
        return gstest.wait_until(check, timeout=timeout, what=what, interval=0.05)
    except AssertionError as e:
        raise AssertionError("%s\n%s\n%s" % (e, entry(b.status(), "a"), b.log()[-3000:])) from e


def cell_ok(b, nb, line, timeout=60):
    """nb's cell `line` answers ok; else what nb and the broker said."""
    try:
        answer = nb.cell(line, timeout=timeout)
    except AssertionError as e:
        raise AssertionError("%s\n-- broker --\n%s\n-- parking --\n%s\n-- %s --\n%s" % (
            e, b.log()[-4000:], b.status()["parking"], nb.name, entry(b.status(), nb.name))) from e
    assert answer == "ok", (answer, nb.stderr(), b.log()[-4000:])


def images(d):
    return sorted(p for p in os.listdir(d) if p.endswith(".gspark")) if d.exists() else []


def park_a(b, a, c, seed):
    """a fills 60 MiB with pattern seed and is parked on the swap tier for
    c's allocation."""
    assert a.cell("alloc x %d" % (60 * MIB)) == "ok", a.stderr()
    assert a.cell("fill x %d" % seed) == "ok"
    assert c.cell("alloc y %d" % (20 * MIB)) == "ok", c.stderr()
    wait_for(b, "the pool to pin 60 MiB",
             lambda: b.status()["parking"]["pool"][0]["pinned_bytes"] >= 60 * MIB)
    assert c.cell("alloc z %d" % (30 * MIB)) == "ok", c.stderr()
    assert entry(b.status(), "a")["parking"] == "parked"


def a_on_disk(disk_notebooks, seed):
    """a (pattern seed) parked and moved on to the disk tier:
    (broker, a, c, the directory, a's image)."""
    b, make, d = disk_notebooks("park_disk_idle_s=0.1")
    a, c = make("a"), make("c")
    park_a(b, a, c, seed)
    wait_for(b, "a on the disk tier", lambda: entry(b.status(), "a")["park_tier"] == "disk")
    return b, a, c, d, d / images(d)[0]


def test_an_idle_parked_notebook_goes_to_disk_and_comes_back_bit_exact(disk_notebooks,
                                                                        short_tmp):
    b, make, d = disk_notebooks("park_disk_idle_s=0.2")
    a, c = make("a"), make("c")
    park_a(b, a, c, 7)
    wait_for(b, "a on the disk tier", lambda: entry(b.status(), "a")["park_tier"] == "disk")
    st = b.status()
    # Its image is the broker's, readable by nobody else; its chunks went
    # back to the pool.
    files = images(d)
    assert len(files) == 1, files
    mode = os.stat(d / files[0]).st_mode
    assert stat.S_IMODE(mode) == 0o600, oct(mode)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert st["parking"]["pool"][0]["lent_bytes"] == 0, st["parking"]["pool"]
    tiers = st["parking"]["tiers"]
    assert tiers["disk"]["sessions"] == 1 and tiers["disk"]["bytes"] >= 60 * MIB, tiers
    assert tiers["pool"]["sessions"] == 0, tiers
    assert st["parking"]["host_parked_bytes"] == 0, st["parking"]  # none of it in RAM
    assert st["parking"]["disk"]["on"] is True, st["parking"]["disk"]
    moves = b.events("tier_move")
    assert moves and moves[-1]["session"] == "a" and moves[-1]["to"] == "disk", moves
    # Its cell brings it back (c, idle, is parked for it), bit-exact, and
    # the image is removed.  (c stays in host memory meanwhile: parked for
    # 0.2 s, it would go to disk too.)
    assert b.cli("set", "park_disk_idle_s=3600", check=False).returncode == 0
    cell_ok(b, a, "check x 7")
    # (removed on a thread of its own: an unlink of gigabytes takes seconds)
    wait_for(b, "a's image removed", lambda: images(d) == [])
    e = entry(b.status(), "a")
    assert e["parking"] == "resident" and e["park_tier"] is None, e
    moves = b.events("tier_move")
    assert moves[-1]["session"] == "a" and moves[-1]["from"] == "disk", moves
    assert b.status()["parking"]["tiers"]["disk"]["bytes"] == 0
    assert a.cell("run 1") == "ok"


def test_a_notebook_that_does_not_fit_the_disk_budget_stays_in_host_memory(disk_notebooks,
                                                                             short_tmp):
    b, make, d = disk_notebooks("park_disk_idle_s=0.1", "park_disk_budget=16M")
    a, c = make("a"), make("c")
    park_a(b, a, c, 3)
    wait_for(b, "the disk tier to refuse a",
             lambda: "park_disk_budget" in (entry(b.status(), "a").get("disk_refused") or ""))
    assert entry(b.status(), "a")["park_tier"] == "swap"
    assert images(d) == []
    assert a.cell("check x 3") == "ok", a.stderr()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")
def test_a_full_disk_leaves_the_notebook_in_host_memory_and_says_so(notebooks, tmp_path,
                                                                     short_tmp):
    # A file system of 40 MiB for a 60 MiB image: the tier sees it has no
    # room before it writes a byte (what statvfs says, less a margin), and
    # a stays in host memory with the reason.  (A disk that fills while
    # the image is written, ENOSPC or EIO, leaves the same: tests/unit/
    # test_disk_file.c injects both.)
    d = tmp_path / "small"
    d.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m,mode=0700", "tmpfs", str(d)],
                   check=True)
    try:
        b, sim, make = notebooks("100M", "park_idle_s=0", "park_disk_dir=%s" % d,
                                 "park_disk_idle_s=0.1", GPUSHARE_POOL_CHUNK=str(CHUNK))
        a, c = (make(n, True, GPUSHARE_SWAP="on") for n in ("a", "c"))
        park_a(b, a, c, 4)
        wait_for(b, "the disk tier to refuse a",
                 lambda: entry(b.status(), "a").get("disk_refused"))
        why = entry(b.status(), "a")["disk_refused"]
        assert str(d) in why and "GiB free" in why, why
        assert entry(b.status(), "a")["park_tier"] == "swap"
        assert images(d) == [] and not [f for f in os.listdir(d) if f.endswith(".tmp")]
        cell_ok(b, a, "check x 4")
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def test_a_corrupted_image_is_an_error_that_names_the_session(disk_notebooks, short_tmp):
    b, a, c, d, path = a_on_disk(disk_notebooks, 5)
    with open(path, "r+b") as f:  # one byte of its data, past the header
        f.seek(os.path.getsize(path) - 4096)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    a.send("check x 5")
    wait_for(b, "the unpark to fail",
             lambda: "checksum mismatch" in (entry(b.status(), "a")["park_error"] or ""))
    err = entry(b.status(), "a")["park_error"]
    assert "a" in err and str(path) in err, err
    failed = b.events("tier_move_failed")
    assert failed and failed[-1]["session"] == "a" and "checksum" in failed[-1]["error"], failed
    a.kill()


def test_an_image_cut_short_is_an_io_error_that_names_the_session(disk_notebooks, short_tmp):
    # A read that fails on the way back (here the file lost its last
    # MiB: the reads past its end come back short, as from a failing
    # disk; tests/unit/test_disk_file.c injects EIO itself) fails the
    # unpark with the session, the file and what broke, keeps the image,
    # and leaves the other notebook running.
    b, a, c, d, path = a_on_disk(disk_notebooks, 6)
    os.truncate(path, os.path.getsize(path) - MIB)
    a.send("check x 6")
    wait_for(b, "the unpark to fail", lambda: entry(b.status(), "a")["park_error"])
    err = entry(b.status(), "a")["park_error"]
    assert "coming back from disk" in err and str(path) in err, err
    failed = b.events("tier_move_failed")
    assert failed and failed[-1]["session"] == "a" and failed[-1]["from"] == "disk", failed
    assert images(d) == [path.name]  # kept: what is left of the memory is there
    assert c.cell("run 1") == "ok", c.stderr()
    a.kill()


def test_a_new_broker_brings_back_a_notebook_a_dead_one_left_on_disk(disk_notebooks,
                                                                     short_tmp):
    # a is on the disk tier when its broker is killed: its window is hollow
    # and the image is the broker's, so its hook waits (its gate closed)
    # for the next broker, which finds the image, adopts it when a's hook
    # joins, and brings it back when a asks for the GPU.  (Programs outside
    # Jupyter: their sessions need no launcher to survive the restart.)
    b, make, d = disk_notebooks("park_disk_idle_s=0.1")
    a, c = make("a", cells=False), make("c", cells=False)
    park_a(b, a, c, 9)
    wait_for(b, "a on the disk tier", lambda: entry(b.status(), "a")["park_tier"] == "disk")
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    assert len(images(d)) == 1
    b2 = gstest.Broker(short_tmp, b.env, b.args)
    b2.stderr_path = short_tmp / "broker-2.stderr"
    try:
        b2.start()
        cell_ok(b2, a, "check x 9")
        # (one event log for both brokers)
        adopted = [e for e in b.events("park_adopted") if e.get("tier") == "disk"]
        assert adopted and adopted[-1]["session"] == "a", b.events("park_adopted")
        back = [e for e in b.events("tier_move") if e["session"] == "a"][-1]
        assert back["from"] == "disk", back
        # (c, parked in part for a, may be on its way to disk by now)
        assert not [f for f in images(d) if f.startswith("p%d-" % a.pid)], images(d)
        assert c.command("run 1", timeout=30) == "ok", c.stderr()
    finally:
        b2.stop()


def test_a_directory_others_can_write_is_refused_with_the_reason(notebooks, tmp_path, short_tmp):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    b, sim, make = notebooks("100M", "park_idle_s=0")
    r = b.cli("set", "park_disk_dir=%s" % d, check=False)
    assert r.returncode != 0 and "writable by others" in r.stderr, (r.stdout, r.stderr)
    assert b.status()["parking"]["disk"]["on"] is False
    # The broker's own directory, made if absent (0700).
    own = tmp_path / "own"
    r = b.cli("set", "park_disk_dir=%s" % own, check=False)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o700


def test_a_notebook_parked_in_part_goes_to_disk_whole_and_comes_back(notebooks, tmp_path,
                                                                      short_tmp):
    """A switch parks a notebook in part (the rest stays on the GPU; its
    lease has room for all of it).  Due for the disk tier, its rest goes
    out into that lease first, then all of it to disk, and it comes back
    bit-exact.  (Before, a session parked in part never left the pool: on
    the H100, two of them held the host budget while a third waited to
    come back from disk, and its unpark failed after 60 s, twice.)"""
    d = tmp_path / "disk"
    b, sim, make = notebooks("100M", "park_idle_s=0", "park_disk_dir=%s" % d,
                             "park_disk_idle_s=3600", GPUSHARE_POOL_CHUNK=str(CHUNK))
    # Segments of 4 MiB (1 GiB on a real GPU): a switch moves part of a
    # working set (test_park_pairs.py).
    x, y = [make(n, GPUSHARE_SWAP="on", GPUSHARE_SWAP_SEGMENT="4M") for n in ("x", "y")]
    for seed, nb in enumerate((x, y), 1):
        assert nb.cell("alloc w %d" % (60 * MIB)) == "ok", nb.stderr()
        assert nb.cell("fill w %d" % seed) == "ok"
    wait_for(b, "the pool to pin 120 MiB",
             lambda: b.status()["parking"]["pool"][0]["pinned_bytes"] >= 120 * MIB)
    for _ in range(3):  # switches until y is out in part
        cell_ok(b, x, "check w 1")
        st = entry(b.status(), "y")
        if st["state"] == "parked" and st["resident_bytes"] > 0:
            break
        cell_ok(b, y, "check w 2")
    st = entry(b.status(), "y")
    assert st["state"] == "parked" and 0 < st["resident_bytes"] < 60 * MIB, st
    assert images(d) == []
    r = b.cli("set", "park_disk_idle_s=0.2", check=False)
    assert r.returncode == 0, r.stderr
    wait_for(b, "y on the disk tier", lambda: entry(b.status(), "y")["park_tier"] == "disk")
    st = entry(b.status(), "y")
    assert st["resident_bytes"] == 0 and st["parked_bytes"] == 60 * MIB, st
    rest = [e for e in b.events("park_start") if e["session"] == "y" and "rest" in e["why"]]
    assert rest, b.events("park_start")
    moves = [e for e in b.events("tier_move") if e["session"] == "y"]
    assert moves and moves[-1]["to"] == "disk" and moves[-1]["bytes"] >= 60 * MIB, moves
    cell_ok(b, y, "check w 2")
    back = [e for e in b.events("tier_move") if e["session"] == "y"][len(moves):]
    assert back and back[0]["from"] == "disk", back
    cell_ok(b, x, "check w 1")
    assert not b.events("tier_move_failed") and not b.events("unpark_failed")
