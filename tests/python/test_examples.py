"""examples/: the tour of two notebooks, hello-shared-gpu.ipynb and
hello-shared-gpu-2.ipynb, run by Debian's nbclient with the Shared GPU
kernel (the kernelspec and launcher of the build) on the simulated GPU with
a real broker, at the same time, as a user runs them: both complete, they
took turns and one of them says in its wait line and its own account that
it waited for the other, %gpushare shows both, and each parks its memory
with %gpushare release and finds every byte of its data back.

The test decides when cells start, where a user would look before going
on: the second notebook's step 1 once the first one's has filled its
memory and computes (as the tour says: start it while the first one's step
1 runs), the two %gpushare cells together (so each has the other to show),
and a check cell once its notebook's memory is parked (Run All may start
it before the broker parks; the park then follows the check)."""
import os
import pwd
import re
import threading

import pytest

import gstest
from gstest import wait_until

# Each notebook fills 48% of it (61 MiB): quick to fill and to park.
pytestmark = pytest.mark.sim(memory="128M", extra=gstest.EXAMPLE_POOL)

TOUR = ("hello-shared-gpu.ipynb", "hello-shared-gpu-2.ipynb")
LOOP_S = 2  # each notebook's GPU work: long enough for a turn (2 s) each


class Tour:
    """One notebook of the tour run by nbclient on a thread of its own;
    before(cell) runs before each of its cells starts."""

    def __init__(self, name, kernels_dir, env, before):
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager
        from nbclient import NotebookClient

        self.name = name
        self.nb = gstest.example_notebook(name, LOOP_S=LOOP_S)
        self.km = KernelManager(kernel_name="shared-gpu",
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]))
        self.client = NotebookClient(
            self.nb, km=self.km, timeout=120,
            resources={"metadata": {"path": os.path.join(gstest.SRCDIR, "examples")}},
            on_cell_start=lambda cell, cell_index: before(self, cell))
        # The notebook's path, as jupyter_server tells a kernel.
        self.env = dict(env, JPY_SESSION_NAME="examples/" + name)
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.client.execute(env=self.env)
        except BaseException as e:  # said by the test, with the outputs
            self.error = e
        finally:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=True)

    def cell(self, kind):
        (c,) = [c for c in self.nb.cells if c.get("id", "").endswith("-" + kind)]
        return c

    def stdout(self, kind):
        return "".join(o.get("text", "") for o in self.cell(kind).outputs
                       if o.output_type == "stream" and o.name == "stdout")

    def shown(self, kind):
        """The text/plain of what the cell displayed (updated in place:
        the last version)."""
        return [o.data["text/plain"] for o in self.cell(kind).outputs
                if o.output_type == "display_data"]


def test_two_notebooks_take_turns_park_and_get_their_data_back(tmp_path, broker, kenv):
    kernels_dir = gstest.install_kernelspec(tmp_path / "prefix", kenv)
    together = threading.Barrier(len(TOUR))
    tours = []

    def session_of(tour):
        return next((s for s in broker.sessions().values()
                     if s.get("notebook") == "examples/" + tour.name), None)

    def before(tour, cell):
        kind = cell.get("id", "").rpartition("-")[2]
        if kind == "step1" and tour is not tours[0]:
            wait_until(lambda: "filled" in tours[0].stdout("step1"), timeout=120,
                       what="the first notebook computing")
        elif kind == "status":
            together.wait(timeout=120)
        elif kind == "check":
            wait_until(lambda: (session_of(tour) or {}).get("state") == "parked", timeout=60,
                       what="%s parked after %%gpushare release" % tour.name)

    tours.extend(Tour(name, kernels_dir, kenv, before) for name in TOUR)
    for t in tours:
        t.thread.join(300)
    for t in tours:
        assert not t.thread.is_alive() and t.error is None, (t.name, t.error, t.nb.cells)

    user = pwd.getpwuid(os.getuid()).pw_name
    waited = []
    for t, other in zip(tours, reversed(tours)):
        assert "backend: simulated" in t.stdout("setup")
        step1 = t.stdout("step1")
        assert "filled 61 MiB of GPU memory with this notebook's pattern" in step1, step1
        account = re.search(r"this cell took \d+\.\d s, of which this notebook waited "
                            r"(\d+\.\d) s for the GPU", step1)
        assert account, step1
        lines = t.shown("step1")
        if lines:  # the wait line, turned into its summary at the end
            assert lines[-1].startswith("Waited ") and \
                "held by %s's notebook %s" % (user, other.name) in lines[-1], lines
            assert float(account.group(1)) >= 1.0, (step1, lines)
            waited.append(t.name)
        # %gpushare: this notebook, then the other one.
        (table,) = t.shown("status")
        assert table.startswith("gpushare: this notebook (session ") and \
            "\n0    this notebook " in table and other.name in table, table
        park = t.stdout("park")
        assert "gpushare: parking 61.4 MiB once the session is idle" in park, park
        check = t.stdout("check")
        assert check.startswith("data OK: all 61 MiB read back bit-exact\n") and \
            "this cell first waited" in check, check  # (for its memory)
    # The two step-1 cells overlapped and could not both hold the GPU: one
    # of them waited for the other.
    assert waited, [t.nb.cells for t in tours]
    # Each was parked when it asked, and brought back by its check cell.
    for t in tours:
        (sid,) = {e["session"] for e in broker.events("register")
                  if e.get("notebook") == "examples/" + t.name}
        parks = [e for e in broker.events() if e.get("session") == sid and
                 e["event"] in ("park_start", "park", "unpark")]
        assert [e["event"] for e in parks][-3:] == ["park_start", "park", "unpark"], parks
        assert parks[-3]["why"] == "its notebook asked (%gpushare release)", parks
