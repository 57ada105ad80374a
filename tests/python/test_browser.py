"""The classic notebook UI (Debian's notebook 6.4) in headless Chromium,
driven by Selenium as a user would: open a notebook, pick Kernel -> Change
kernel -> Shared GPU, type a cell that uses the simulated GPU and run it
with Shift+Enter while another notebook holds the GPU.  The page shows the
wait line (gpushare_ipython, which the kernelspec loads: a cell that waits
over a second says why and for how long, updated in place), then, once the
other notebook's cell ends, the cell's output with the line turned into a
summary.  A second cell, `%gpushare`, shows the notebook's session and the
other notebook as a table; `gpushare status` lists the session too.
Screenshots of the page while the cell waits and at the end are kept in
test_browser-artifacts/ of the build tree."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import gstest
from gstest import wait_until

ARTIFACTS = os.path.join(gstest.BUILDDIR, "tests", "python", "test_browser-artifacts")
# Typed into the cell as it is (CodeMirror closes brackets and quotes as
# they are typed and skips over the closing ones; no line opens a block,
# so nothing is auto-indented): the cell's text comes out the same.
CELL = ("import gpusim\n"
        "gpusim.init(); gpusim.launch(us=2000); gpusim.synchronize()\n"
        "print('simulated GPU busy ms:', gpusim.process_busy_ns() // 1000000)")
# The other notebook's cell: GPU work until the test creates the flag file.
HOLD = ("import gpusim, os\n"
        "gpusim.init()\n"
        "while not os.path.exists(%r):\n"
        "    gpusim.launch(us=2000); gpusim.synchronize()\n")


# Exclusive policy, with a quantum longer than the test: the other
# notebook keeps the GPU until its cell ends.
pytestmark = pytest.mark.broker("--policy", "exclusive", "--tq", "3600")


@pytest.fixture
def server(tmp_path, sim, broker):
    gstest.become_subreaper()
    prefix = tmp_path / "prefix"
    gstest.install_kernelspec(prefix, sim)
    env = dict(broker.env, JUPYTER_PATH=str(prefix / "share" / "jupyter"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
               JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"), HOME=str(tmp_path),
               # Only a cell's end hands the GPU on (no idle release by the
               # hook if the holder's loop stalls on a loaded machine).
               GPUSHARE_IDLE_RELEASE_MS="0")
    # PYTEST_CURRENT_TEST: ipykernel leaves the kernel's stderr file
    # descriptor uncaptured under it, and the hook's wait line would miss the page.
    for k in ("GPUSHARE_KERNEL_ID", "GPUSHARE_USER", "JUPYTERHUB_USER", "GPUSHARE_SESSION",
              "GPUSHARE_LOG", "PYTEST_CURRENT_TEST"):
        env.pop(k, None)
    s = gstest.NotebookServer(tmp_path, env)
    try:
        yield s
    finally:
        s.stop()
        strays = gstest.kill_strays(keep=[broker.proc.pid])
        if strays:
            print("killed what was left behind:", strays, file=sys.stderr)


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium through Debian's chromedriver.  --no-sandbox: as
    root (CI) Chromium refuses to start without it, and containers often
    lack the namespaces its sandbox needs."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,900", "--user-data-dir=%s" % (tmp_path / "chromium")):
        opts.add_argument(a)
    service = Service("/usr/bin/chromedriver", log_path=str(tmp_path / "chromedriver.log"),
                      env=dict(os.environ, HOME=str(tmp_path)))
    driver = webdriver.Chrome(service=service, options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def page_text(driver, css):
    """The text of what css selects, read in one go by the page itself (an
    output updated in place is a new element: one found earlier goes stale)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map(e => e.innerText).join('')", css)


def count(driver, css):
    return driver.execute_script("return document.querySelectorAll(arguments[0]).length", css)


def test_notebook_ui_runs_a_shared_gpu_cell_and_shows_the_wait(tmp_path, broker, server, browser,
                                                                capsys):
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    # Another notebook (a session of the same server) holds the GPU.
    flag = str(tmp_path / "release")
    r = server.api("POST", "/api/sessions", json={"path": "other.ipynb", "type": "notebook",
                                                  "name": "", "kernel": {"name": "shared-gpu"}})
    assert r.status_code == 201, r.text
    other = r.json()["kernel"]["id"]
    ch = gstest.KernelChannel("ws://127.0.0.1:%d/api/kernels/%s/channels" % (server.port, other),
                               server.token)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # a previous run's
    os.makedirs(ARTIFACTS)
    shot = os.path.join(ARTIFACTS, "notebook.png")
    waiting_shot = os.path.join(ARTIFACTS, "notebook-waiting.png")
    try:
        holding = ch.execute(HOLD % flag)
        wait_until(lambda: broker.sessions().get(other, {}).get("state") == "running",
                   timeout=120, what="the other notebook holding the GPU")
        wait_until(lambda: broker.sessions()[other]["notebook"] == "other.ipynb",
                   timeout=120, what="its notebook's name, asked of the server by the launcher")

        # A new notebook, opened with the plain Python kernel.
        assert server.api("PUT", "/api/contents/mine.ipynb", json={"type": "notebook"}) \
            .status_code == 201
        browser.get("%s/notebooks/mine.ipynb?token=%s" % (server.url, server.token))
        wait = lambda cond, what, timeout=120: wait_until(  # noqa: E731
            cond, timeout=timeout, what=what, interval=0.2)
        connected = ("return Jupyter.notebook && Jupyter.notebook.kernel && "
                     "Jupyter.notebook.kernel.is_connected() ? Jupyter.notebook.kernel.name : null")
        wait(lambda: browser.execute_script(connected), "the page's first kernel")

        # Kernel -> Change kernel -> Shared GPU: a click, a hover over the
        # submenu, a click, as a user does it (again should a slow page not
        # have the menu ready yet).
        def pick_shared_gpu():
            try:
                browser.find_element("id", "kernellink").click()
                ActionChains(browser).move_to_element(
                    browser.find_element("css selector", "#menu-change-kernel > a")).perform()
                browser.find_element("css selector", "#kernel-submenu-shared-gpu > a").click()
                return True
            except WebDriverException:
                ActionChains(browser).send_keys(Keys.ESCAPE).perform()
                return False

        wait(pick_shared_gpu, "Kernel -> Change kernel -> Shared GPU")
        wait(lambda: browser.execute_script(connected) == "shared-gpu", "the Shared GPU kernel")
        assert page_text(browser, ".kernel_indicator_name") == "Shared GPU"
        mine, name = server.kernel_of("mine.ipynb")
        assert name == "shared-gpu"
        wait(lambda: mine in broker.sessions(), "the notebook's session at the broker")

        # Type the cell and run it with Shift+Enter.
        browser.find_element("css selector", ".cell .CodeMirror").click()
        ActionChains(browser).send_keys(CELL).perform()
        ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT) \
            .perform()
        wait(lambda: broker.sessions()[mine]["state"] == "waiting", "the cell waiting for the GPU")
        # The wait line: who holds the GPU (notebook 6 does not tell the
        # kernel its notebook's name: the launcher asked the server) and for
        # how long at most, and how long the cell has waited so far,
        # changing in place.
        line = wait(lambda: page_text(browser, ".gpushare-wait"), "the wait line")
        assert re.fullmatch(r"Waiting for the GPU for \d+ s: held by \S+'s notebook "
                            r"other\.ipynb for at most \d+ min more", line), line
        wait(lambda: page_text(browser, ".gpushare-wait") not in ("", line),
             "the wait line to change in place")
        assert count(browser, ".gpushare-wait") == 1
        assert browser.save_screenshot(waiting_shot)
        # The hook's own notice on stderr is off: the line says it.
        assert page_text(browser, ".output_stderr") == ""

        # The other notebook's cell ends: this one gets the GPU and finishes.
        open(flag, "w").close()
        assert ch.reply(holding)[0]["status"] == "ok"
        wait(lambda: "simulated GPU busy ms:" in page_text(browser, ".output_stdout"),
             "the cell's output")
        assert page_text(browser, ".output_stdout").strip() == "simulated GPU busy ms: 2"
        # The wait is over: the line is its summary.
        summary = wait(lambda: page_text(browser, ".gpushare-wait-done"), "the summary")
        assert re.fullmatch(r"Waited \d+\.\d s for the GPU: held by \S+'s notebook other\.ipynb",
                            summary), \
            summary
        assert count(browser, ".gpushare-wait") == 1
        assert page_text(browser, ".output_stderr") == ""
        assert browser.execute_script("return Jupyter.notebook.get_cell(0).get_text()") == CELL

        # The next cell (Shift+Enter left the page editing a new one): the
        # magic's table, this notebook first, then the other one.
        ActionChains(browser).send_keys("%gpushare").perform()
        ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT) \
            .perform()
        rows = wait(lambda: browser.execute_script(
            "return Array.from(document.querySelectorAll('.gpushare-status tbody tr'))"
            ".map(r => Array.from(r.cells).map(c => c.innerText))"), "the %gpushare table")
        assert browser.execute_script("return Jupyter.notebook.get_cell(1).get_text()") == \
            "%gpushare"
        assert len(rows) == 2, rows
        assert rows[0][:2] == ["0", "this notebook"] and int(rows[0][4]) >= 1, rows
        assert rows[1][:2] == ["0", "other.ipynb"] and rows[1][3] == "idle", rows
        assert page_text(browser, ".gpushare-status > div").startswith(
            "gpushare: this notebook (session %s)" % mine)

        assert browser.save_screenshot(shot)
        with capsys.disabled():  # into the test's log, passed or not
            print("screenshots of the notebook page: %s, %s" % (waiting_shot, shot),
                  file=sys.stderr)

        # `gpushare status` lists the notebook's session, which had the GPU.
        status = broker.cli("status").stdout
        assert mine in status, status
        s = broker.sessions()[mine]
        assert s["grants"] >= 1 and s["kernel_id"] == mine
    finally:
        ch.close()
        if not os.path.exists(shot):  # the page as it was when the test failed
            failed = os.path.join(ARTIFACTS, "notebook-failed.png")
            browser.save_screenshot(failed)
            print("screenshot of the notebook page as the test failed: %s" % failed,
                  file=sys.stderr)
