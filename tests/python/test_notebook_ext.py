"""gpushare_ipython, the IPython extension the Shared GPU kernelspec loads
(kernelspecs/ipython/), in real kernels on the simulated GPU with a real
broker: a notebook run by nbclient whose cell waits while another notebook
holds the GPU shows the wait line (display_data), updated in place
(update_display_data) and turned into a summary when the wait ends, and no
hook notice on stderr; a kernel where the extension cannot be imported
starts and runs cells all the same.  The holder keeps the GPU in a cell
that waits for a file the test creates once the waiting cell has shown
what the test looks for: nothing here waits for a time to pass."""
import os
import pwd
import re
import threading

import pytest

import gstest
from gstest import Kernels, held_cell, wait_until

# Exclusive, with a quantum longer than the test: a notebook keeps the GPU
# until its cell ends.
pytestmark = pytest.mark.broker("--policy", "exclusive", "--tq", "3600")

GPU_INIT = "import gpusim\ngpusim.init()\ngpusim.launch(us=1000)\ngpusim.synchronize()\n"
GPU_CELL = ("import gpusim\n"
            "gpusim.init(); gpusim.launch(us=2000); gpusim.synchronize()\n"
            "print('done')")


@pytest.fixture
def kernels(tmp_path, sim):
    ks = Kernels(tmp_path, gstest.install_kernelspec(tmp_path / "prefix", sim))
    yield ks
    ks.close()


def holding(kernels, broker, kenv, flag, notebook="work/train.ipynb"):
    """A notebook kernel whose cell holds the GPU until flag exists; returns
    (kernel id, client, the cell's msg_id)."""
    # No idle release: the holder's cell sleeps between its looks at the flag.
    kid, km, kc = kernels.start(dict(kenv, JPY_SESSION_NAME=notebook,
                                     GPUSHARE_IDLE_RELEASE_MS="0"))
    msg_id = kc.execute(held_cell(flag, GPU_INIT))
    wait_until(lambda: broker.sessions().get(kid, {}).get("state") == "running",
               what="the other notebook holding the GPU")
    return kid, kc, msg_id


class Recording:
    """nbclient running a notebook in a thread, keeping every IOPub message
    of its cells as it comes."""

    def __init__(self, tmp_path, kernels_dir, env, cells):
        import nbformat
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager
        from nbclient import NotebookClient

        self.messages = []
        self.lock = threading.Lock()
        recording = self

        class Client(NotebookClient):
            def process_message(self, msg, cell, cell_index):
                with recording.lock:
                    recording.messages.append(msg)
                return super().process_message(msg, cell, cell_index)

        self.nb = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell(c) for c in cells])
        self.km = KernelManager(kernel_name="shared-gpu",
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]))
        self.client = Client(self.nb, km=self.km, timeout=120,
                             resources={"metadata": {"path": str(tmp_path)}})
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(env,), daemon=True)
        self.thread.start()

    def _run(self, env):
        try:
            self.client.execute(env=env)
        except BaseException as e:  # seen by join()
            self.error = e
        finally:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=True)

    def of_type(self, *types):
        with self.lock:
            return [m for m in self.messages if m["msg_type"] in types]

    def join(self, timeout=120):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "nbclient did not finish"
        if self.error:
            raise self.error


def text(msg):
    return msg["content"]["data"]["text/plain"]


def test_wait_line_through_nbclient(tmp_path, broker, kenv, kernels):
    flag = tmp_path / "release"
    other, kc_other, held = holding(kernels, broker, kenv, flag)
    run = Recording(tmp_path, kernels.mkm.kernel_spec_manager.kernel_dirs[0], kenv, [GPU_CELL])
    try:
        # The line appears once the cell has waited a second, then changes
        # in place (the seconds so far) while the other notebook holds on.
        first = wait_until(lambda: run.of_type("display_data"), timeout=120,
                           what="the wait line")[0]
        # who holds it, and how long its slice may still last (--tq 3600);
        # the seconds so far (at least 1: the poll may come late)
        line = r"Waiting for the GPU for (\d+) s: held by \S+'s notebook train\.ipynb " \
               r"for at most \d+ min more"
        m = re.fullmatch(line, text(first))
        assert m and int(m.group(1)) >= 1, text(first)
        assert "gpushare-wait" in first["content"]["data"]["text/html"]
        display_id = first["content"]["transient"]["display_id"]
        later = wait_until(lambda: [u for u in run.of_type("update_display_data")
                                    if text(u) != text(first)],
                           timeout=120, what="the line updated in place")[0]
        m2 = re.fullmatch(line, text(later))
        assert m2 and int(m2.group(1)) > int(m.group(1)), text(later)
    finally:
        flag.touch()
    assert kc_other.get_shell_msg(timeout=120)["parent_header"]["msg_id"] == held
    run.join()
    updates = run.of_type("update_display_data")
    assert all(m["content"]["transient"]["display_id"] == display_id for m in updates)
    last = text(updates[-1])
    assert last.startswith("Waited ") and "s for the GPU: held by " in last and \
        "'s notebook train.ipynb" in last, last
    assert "gpushare-wait-done" in updates[-1]["content"]["data"]["text/html"]
    # In the notebook: the cell's output, and one display turned summary.
    outputs = run.nb.cells[0].outputs
    assert [o["output_type"] for o in outputs].count("display_data") == 1, outputs
    assert any(o.get("name") == "stdout" and o["text"] == "done\n" for o in outputs), outputs
    summary = [o for o in outputs if o["output_type"] == "display_data"][0]
    assert summary["data"]["text/plain"] == last
    # The hook said nothing on stderr: the line says it.
    assert not any(o.get("name") == "stderr" for o in outputs), outputs


def test_kernel_without_the_extension_still_runs(tmp_path, broker, kenv, kernels):
    """The kernelspec asks IPython to load gpushare_ipython; where it is not
    installed the kernel starts, says so once in its log, and runs cells."""
    env = dict(kenv, PYTHONPATH=gstest.GPUSIM_DIR)  # gpusim, but no gpushare_ipython
    kid, km, kc = kernels.start(env)
    content, out, err = gstest.run_cell(kc, GPU_CELL)
    assert content["status"] == "ok" and out == "done\n", (content, err)
    content, out, _ = gstest.run_cell(kc, "import sys; print('gpushare_ipython' in sys.modules)")
    assert out == "False\n"
    assert kernels.log(kid).count("gpushare_ipython") >= 1, kernels.log(kid)


def run(kc, code):
    """Execute code; (reply content, stdout text, the display_data bundles)."""
    outputs = []
    reply = kc.execute_interactive(code, timeout=120, output_hook=outputs.append)
    out = "".join(m["content"]["text"] for m in outputs
                  if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
    shown = [m["content"]["data"] for m in outputs if m["msg_type"] == "display_data"]
    return reply["content"], out, shown


def test_gpushare_magic_status_release_and_wait(tmp_path, broker, kenv, kernels):
    other, _, kc_other = kernels.start(dict(kenv, JPY_SESSION_NAME="work/other.ipynb"))
    content, out, _ = run(kc_other, "import gpusim; gpusim.init(); p = gpusim.alloc(4 << 20)")
    assert content["status"] == "ok", content
    # No idle release: the grant of a cell's GPU work is still held when
    # %gpushare release runs later in the same cell.
    mine, _, kc = kernels.start(dict(kenv, JPY_SESSION_NAME="work/mine.ipynb",
                                     GPUSHARE_IDLE_RELEASE_MS="0"))
    content, out, _ = run(kc, "import gpusim\ngpusim.init()\np = gpusim.alloc(8 << 20)\n"
                              "gpusim.write(p, b'kept')\ngpusim.launch(us=1000)\n"
                              "gpusim.synchronize()")
    assert content["status"] == "ok", content

    # %gpushare: this notebook first, then the other one on its GPU.
    content, out, shown = run(kc, "%gpushare")
    assert content["status"] == "ok" and len(shown) == 1, (content, out, shown)
    table = shown[0]
    text = table["text/plain"].splitlines()
    assert text[0] == "gpushare: this notebook (session %s)" % mine, text
    assert text[1].split() == ["GPU", "notebook", "user", "state", "grants", "GPU", "time",
                               "waited", "resident", "parked"], text
    me = text[2].split()
    # (its state: idle, or running while the last cell's grant goes back)
    assert me[:4] == ["0", "this", "notebook", pwd.getpwuid(os.getuid()).pw_name], me
    assert me[4] in ("idle", "running"), me
    assert int(me[5]) >= 1 and me[-4:] == ["8.0", "MiB", "0", "B"], me
    them = text[3].split()
    assert them[:2] == ["0", "other.ipynb"] and them[-4:] == ["4.0", "MiB", "0", "B"], them
    assert any(line.startswith("GPU 0: ") for line in text[4:]), text
    assert "wait line: after 1 s" in table["text/plain"]
    assert "<table>" in table["text/html"] and "this notebook" in table["text/html"]
    assert run(kc, "%gpushare status")[2][0]["text/plain"].startswith(text[0])

    # %gpushare release: the hook gives the grant back at once, and the
    # broker parks the memory when the cell ends; the next cell brings it.
    content, out, _ = run(kc, "gpusim.launch(us=1000); gpusim.synchronize()\n"
                              "%gpushare release")
    assert content["status"] == "ok", content
    lines = out.splitlines()
    assert lines[0].startswith("gpushare: the GPU is handed back (1 GPU)"), lines
    assert lines[1] == ("gpushare: parking 8.0 MiB once the session is idle (its cell ends); "
                        "the next cell that uses the GPU brings it back."), lines
    s = wait_until(lambda: broker.sessions()[mine]["state"] == "parked" and
                   broker.sessions()[mine], what="the notebook parked")
    assert s["parked_bytes"] == 8 << 20 and s["resident_bytes"] == 0, s
    assert broker.sessions()[other]["state"] != "parked"  # only the one that asked
    content, out, _ = run(kc, "print(gpusim.read(p, 4))")
    assert out == "b'kept'\n", (content, out)
    assert broker.sessions()[mine]["resident_bytes"] == 8 << 20
    assert [e["why"] for e in broker.events("park_start") if e["session"] == mine] == \
        ["its notebook asked (%gpushare release)"]

    # %gpushare wait: the wait line's setting.
    assert run(kc, "%gpushare wait off")[1] == "gpushare: the wait line is off.\n"
    assert run(kc, "%gpushare wait")[1] == "gpushare: the wait line is off.\n"
    assert run(kc, "%gpushare wait 2.5")[1] == "gpushare: the wait line is after 2.5 s.\n"
    assert "expected off, on or a number" in run(kc, "%gpushare wait soon")[1]
    assert "%gpushare release" in run(kc, "%gpushare help")[1]
    content, out, _ = run(kc, "%gpushare bogus")
    assert content["status"] == "ok" and "unknown arguments 'bogus'" in out


def test_wait_line_words_for_every_wait():
    """The line for each thing a cell can wait for, its update in place and
    the summary, from a scripted hook (the extension's own code, no kernel)."""
    import sys
    sys.path.insert(0, gstest.PROVISIONER_PATH)
    from gpushare_ipython.waitline import CellWatch

    gpu0 = {"gpu": 0, "uuid": "GPU-0", "state": "none", "waited_s": 1.0, "waits": 1}
    states = [{"devices": [dict(gpu0)]}]  # when the cell starts: 1 s waited before it

    class Hook:
        def wait_state(self):
            return states[-1]

    class Handle:
        def __init__(self, shown):
            self.shown = shown

        def update(self, bundle, raw):
            assert raw
            self.shown.append(("update", bundle))

    shown = []

    def display(bundle):
        shown.append(("display", bundle))
        return Handle(shown)

    def step(**d):
        states.append({"devices": [dict(gpu0, **d)]})
        cell.poll()
        return shown[-1][1]["text/plain"] if shown else None

    cell = CellWatch(Hook(), 1.0, display, start=False)
    assert step(state="gpu", for_s=0.5) is None  # under the threshold: nothing
    assert step(state="gpu", for_s=1.2, holder="alice's notebook a.ipynb", left_s=29.2) == \
        "Waiting for the GPU for 1 s: held by alice's notebook a.ipynb for at most 30 s more"
    assert step(state="gpu", for_s=2.0, holder="alice's notebook a.ipynb") == \
        "Waiting for the GPU for 2 s: held by alice's notebook a.ipynb until its cell ends"
    assert step(state="gpu", for_s=3.0, info="queued: the GPU is being handed over") == \
        "Waiting for the GPU for 3 s: queued: the GPU is being handed over"
    assert step(state="swap_in", for_s=4.0, done_bytes=1000000000, total_bytes=4000000000) == \
        ("Waiting for the GPU for 4 s: this notebook's memory is coming back from host memory: "
         "1.0 GB of 4.0 GB (25%)")
    assert step(state="parked", for_s=5.0) == (
        "Waiting for the GPU for 5 s: this notebook's memory is in host memory and comes back "
        "when the GPU has room")
    assert step(state="room", for_s=6.0, room_bytes=2000000000) == (
        "Waiting for the GPU for 6 s: the GPU is full: room is being made for 2.0 GB (idle "
        "notebooks' memory goes to host memory)")
    # The wait ends: the summary, in the same place, with everything it was for.
    summary = ("Waited 6.5 s for the GPU: held by alice's notebook a.ipynb; queued: the GPU is "
               "being handed over; memory back from host memory (4.0 GB); memory waited in host "
               "memory for room; room made on the GPU for 2.0 GB")
    assert step(state="none", waited_s=7.5, waits=2) == summary
    assert [kind for kind, _ in shown] == ["display"] + ["update"] * 6
    assert "gpushare-wait-done" in shown[-1][1]["text/html"]
    cell.finish()  # at the cell's end: the same summary, not sent again
    assert len(shown) == 7
    # Two GPUs: each line names its GPU.
    states.append({"devices": [dict(gpu0), dict(gpu0, gpu=1, state="gpu", for_s=1.5)]})
    cell = CellWatch(Hook(), 1.0, display, start=False)
    cell.poll()
    assert shown[-1][1]["text/plain"] == \
        "Waiting for GPU 1 for 1 s: held by another notebook"
