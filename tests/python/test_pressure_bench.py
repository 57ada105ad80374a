"""The memory-pressure bench (tests/gpu/pressure.py, issue 33) on the
simulated GPU, tiny: a 64 MiB card and a simulated host of 96 MiB
(GPUSHARE_SIM_HOST_MEMORY), the real broker with its default settings
(park_idle_s=0), notebooks on both tiers.  Checked: the bench sizes itself
from the card and the host, writes a row per cell with what the GPU
machine's run is read for, a summary that adds them up, and MemAvailable
samples; no cell ever sees its data changed.  Performance is never
asserted here."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import gstest

PRESSURE = os.path.join(gstest.SRCDIR, "tests", "gpu", "pressure.py")
CELL_DRIVER = os.path.join(gstest.BUILDDIR, "bench", "cell_driver")
CELL_FIELDS = {"config", "phase", "notebook", "tier", "round", "cmd", "wall_s", "waited_s",
               "bit_exact", "ok", "error"}


def run_bench(tmp_path_factory, configs, **extra):
    """Runs the bench once: (its JSON lines, its OUT directory)."""
    top = tmp_path_factory.mktemp("pressure")
    carry, out = top / "carry", top / "out"
    (carry / "gpushare").mkdir(parents=True)
    (carry / "lib").mkdir()
    for path in (gstest.BROKER, gstest.HOOK, CELL_DRIVER):
        os.symlink(path, carry / "gpushare" / os.path.basename(path))
    sockdir = tempfile.mkdtemp(prefix="gs")  # ipc socket paths hold 107 bytes
    env = gstest.sim_env(top, memory="64M", concurrency=4, extra={
        "GPUSHARE_SIM_HOST_MEMORY": "96M",
        "GPUSHARE_POOL_CHUNK": "4M",  # the broker's pool pins small chunks on this small host
        "GPUSHARE_SWAP_SEGMENT": "2M",  # segments below chunks, as on a GPU (256M, 1G)
        "PRESSURE_BACKEND": "sim", "PRESSURE_CONFIGS": configs, "PRESSURE_ROUNDS": "1",
        "PRESSURE_DEADLINE_S": "100", "PRESSURE_CELL_TIMEOUT_S": "40",
        "PRESSURE_ENDPOINT": "ipc://%s/p.sock" % sockdir, **extra,
    })
    for k in ("GPUSHARE_BROKER", "GPUSHARE_SESSION", "GPUSHARE_SWAP", "PRESSURE_N",
              "PRESSURE_GIB", "PRESSURE_TIERS", "PRESSURE_PHASES"):
        env.pop(k, None)
    try:
        r = subprocess.run([sys.executable, PRESSURE, str(carry), str(out)], env=env,
                           capture_output=True, text=True, cwd=os.path.dirname(PRESSURE),
                           timeout=300)
    finally:
        gstest.unlink_sim(env)
        shutil.rmtree(sockdir, ignore_errors=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, r.stderr[-3000:]
    return lines, out


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return run_bench(tmp_path_factory, "many")


@pytest.fixture(scope="module")
def disk_bench(tmp_path_factory):
    """The disk config: images in a directory of this test's own."""
    parent = tmp_path_factory.mktemp("disk")
    # Notebooks of 16 segments (8 GiB of 256 MiB ones on the H100), so that
    # a switch parks part of one, as there.
    return run_bench(tmp_path_factory, "disk", PRESSURE_DISK_DIR=str(parent),
                     PRESSURE_DISK_GIB="0.015625", GPUSHARE_SWAP_SEGMENT="1M")


def of(lines, event):
    return [x for x in lines if x["event"] == event]


def test_the_bench_sizes_itself_from_the_card_and_the_host(bench):
    lines, _ = bench
    (cfg,) = of(lines, "config")
    # 64 MiB card, host room half the simulated host (the broker's default
    # budget is half the RAM): notebooks of min(0.3 x 64, 48 / 2) -> 20 MiB;
    # three on the GPU beside a cell's scratch, two parked at once.
    assert cfg["bytes"] == 20 << 20 and cfg["scratch_bytes"] == 2 << 20, cfg
    assert (cfg["gpu_fits"], cfg["host_fits"], cfg["notebooks"]) == (3, 2, 5), cfg
    assert cfg["over_notebooks"] == 6
    assert cfg["machine"]["sim_host_bytes"] == 96 << 20
    assert cfg["broker_settings"]["park_idle_s"] == "0"


def test_every_cell_has_a_row_and_no_data_ever_changes(bench):
    lines, _ = bench
    cells = of(lines, "cell")
    for c in cells:
        assert CELL_FIELDS <= set(c), c
        assert c["bit_exact"] is not False, c  # a changed byte is never excused
        assert c["ok"] == (c["error"] is None), c
        if c["cmd"] == "cell" and c["ok"]:
            assert c["same_address"] is True and c["bit_exact"] is True, c
    fit = [c for c in cells if c["phase"] == "fit"]
    names = {c["notebook"] for c in fit}
    assert len(names) == 5
    assert {c["tier"] for c in fit} == {"swap", "checkpoint"}  # both tiers in one run
    for n in names:  # an allocation, then a round of cells
        assert [c["cmd"] for c in fit if c["notebook"] == n][0] == "alloc"
        assert [(c["cmd"], c["round"]) for c in fit if c["notebook"] == n][-1][1] == 1
    over = {c["notebook"] for c in cells if c["phase"] == "over"}
    assert len(over) == 6  # every notebook of the over phase got to run


def test_the_summary_adds_up_the_rows(bench):
    lines, out = bench
    cells = of(lines, "cell")
    (s,) = of(lines, "summary")
    assert s["cells"] == len(cells)
    assert s["cells_ok"] == sum(1 for c in cells if c["ok"])
    assert s["deaths"] == len(of(lines, "death")) == len(s["dead"])
    assert s["fit"]["cells"] + s["over"]["cells"] == len(cells)
    assert "dmesg" in s and s["mem_available_min"] > 0
    assert s["sim_host"]["limit"] == 96 << 20 and s["sim_host"]["peak"] > 0
    assert s["sim_host"]["used"] == 0  # everything closed: nothing left charged
    samples = [json.loads(x) for x in open(out / "pressure-host.jsonl")]
    assert len(samples) >= 2 and all(x["mem_available"] > 0 for x in samples)
    assert any(x.get("sim_host_used", 0) > 0 for x in samples)
    assert (out / "pressure.jsonl").read_text().count('"event": "cell"') == len(cells)


def test_nothing_dies_and_every_notebook_finishes(bench):
    lines, out = bench
    (s,) = of(lines, "summary")
    problems = []
    if s["deaths"] or s["sim_host"]["oom_kills"]:
        problems.append("died: %s (simulated OOM kills: %d)" % (s["dead"],
                                                                s["sim_host"]["oom_kills"]))
    if s["stuck"] or s["deadline_hit"]:
        problems.append("waited for ever: %s" % s["stuck"])
    # Within capacity every cell of every notebook runs; beyond it, a cell
    # may still fail (an allocation the broker cannot make room for while
    # the notebooks holding the memory wait for room themselves: issue 33
    # goes on), but nobody dies or waits for ever.
    if s["fit"]["notebooks_finished"] != 5 or s["fit"]["cells_ok"] != s["fit"]["cells"]:
        problems.append("not every notebook finished within capacity: %s" % s["fit"])
    # The broker's host ledger (issue 33) knows the simulated host
    # (park_host_memory): nothing is parked beyond it, nobody dies.
    assert not s["deaths"] and not s["sim_host"]["oom_kills"], s["dead"]
    # Every notebook finishes: a switch through the relay (the outgoing
    # notebook fills the chunks the incoming one returns) needs segments
    # below the pool's chunks, as on a GPU (256 MiB and 1 GiB); before that
    # was checked, a 20 MiB segment and 4 MiB chunks made the switch fail
    # and start again for ever.
    assert not problems, problems


def test_beyond_gpu_and_host_budget_notebooks_take_turns_through_the_disk(disk_bench):
    """Two notebooks more than the GPU's and the host's budgets hold (two
    each): the host budget's pressure sends the oldest parked to disk, every
    notebook's cell comes back bit-exact, and no image is left."""
    lines, out = disk_bench
    (cfg,) = of(lines, "config")
    assert (cfg["gpu_fits"], cfg["host_fits"], cfg["disk_fits"], cfg["notebooks"]) == (2, 2, 2, 6)
    assert cfg["tiers"] == ["swap"] and "park_disk_dir" in cfg["broker_settings"], cfg
    cells = of(lines, "cell")
    (s,) = of(lines, "summary")
    assert not s["deaths"] and not s["stuck"] and not s["deadline_hit"], s
    assert s["fit"]["notebooks_finished"] == 6 and s["cells_ok"] == s["cells"] == 12, s
    assert all(c["bit_exact"] and c["same_address"] for c in cells if c["cmd"] == "cell"), cells
    disk = s["disk"]
    # at least the two that the GPU and the host cannot hold went to disk,
    # and came back for their cells
    assert disk["to_disk"] >= 2 and disk["from_disk"] >= 2 and not disk["failed"], disk
    assert disk["images_left"] == 0, disk
    # Notebooks parked in part by a switch went to disk whole, their rest
    # out first (on the H100, before that, two of them held the host budget
    # while a third waited to come back from disk, and its unpark failed).
    with open(out / "pressure-disk-events.jsonl") as f:
        events = [json.loads(line) for line in f]
    rest = [e for e in events if e["event"] == "park_start" and "its rest goes out" in e["why"]]
    assert rest, [e for e in events if e["event"] in ("park_start", "park", "tier_move")]
    assert not [e for e in events if e["event"] in ("tier_move_failed", "unpark_failed")]
