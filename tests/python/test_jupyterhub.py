"""examples/jupyterhub/jupyterhub_config.py on a real JupyterHub (Debian's
jupyterhub 3.0 and configurable-http-proxy), offline on loopback: two users
log in, each starts a Shared GPU kernel through the REST API and runs cells
on the simulated GPU over the kernel's websocket, as a notebook page does.
The broker (exclusive policy) shows both sessions with their users, and,
while both notebooks want the GPU, hands it from one to the other at each
cell's end: its event log's grants alternate.

The test's config loads the example and replaces only what a test must:
DummyAuthenticator and SimpleLocalProcessSpawner (no Unix accounts, no
PAM), private ports and files, and the kernelspec's place."""
import os
import subprocess
import sys

import pytest
import requests

import gstest
import kernelports
from gstest import wait_until

EXAMPLE = os.path.join(gstest.SRCDIR, "examples", "jupyterhub", "jupyterhub_config.py")
USERS = ("alice", "bob")
ROUNDS = 4  # hand-overs under contention

# A cell of GPU work that lasts until the test creates a file: the notebook
# holds the GPU (exclusive policy) until then, so the test decides when a
# cell ends while the other notebook waits.
SETUP = ("import gpusim, os\n"
         "gpusim.init()\n"
         "def hold(flag):\n"
         "    n = 0\n"
         "    while not os.path.exists(flag):\n"
         "        gpusim.launch(us=2000); gpusim.synchronize(); n += 1\n"
         "    print('kernels', n)\n"
         "gpusim.launch(us=2000); gpusim.synchronize()\n"
         "print('simulated', gpusim.is_simulated(), gpusim.process_busy_ns() >= 2000000)")

TEST_CONFIG = """\
c = get_config()  # noqa: F821
load_subconfig({example!r})  # noqa: F821
# What a test replaces: no PAM and no Unix accounts (DummyAuthenticator
# takes any password; SimpleLocalProcessSpawner runs every server as us),
# private ports and files, and a kernelspec installed for this test only.
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {home!r}
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.pid_file = {proxy_pid!r}
c.JupyterHub.db_url = "sqlite:///{db}"
c.JupyterHub.cookie_secret_file = {secret!r}
c.Spawner.start_timeout = 300  # a loaded 2-core machine
c.Spawner.http_timeout = 300
c.Spawner.interrupt_timeout = 60  # time for a server to shut its kernels down
c.Spawner.cmd = [{python!r}, "-m", "jupyterhub.singleuser"]  # Debian's, whatever PATH says
c.Spawner.args = {args!r}
c.Spawner.environment.update({env!r})
# Each single-user server's port, drawn so that no test beside it can take
# it before the server binds it (jupyterhub's own choice binds port 0 and
# lets go); its kernels' ports likewise, through the configuration that
# JUPYTER_CONFIG_DIR of the environment above names.
{kernelports_import}c.Spawner.pre_spawn_hook = lambda spawner: setattr(spawner, "port", kernelports.reserve_port())
"""


class Hub:
    """jupyterhub started with the test config; start() returns once its
    API answers through the proxy.  The hub, its proxy and the proxy's API
    take their ports up front (the hub tells the proxy where it is): three
    reserved ones, and new ones if one was taken all the same."""

    def __init__(self, tmp_path, env, keep=()):
        self.tmp = tmp_path / "hub"
        self.tmp.mkdir()
        self.env = env
        self.keep = keep  # processes of ours that a failed start must not take down
        self.proc = None
        self.log = None
        self.log_path = self.tmp / "hub.log"

    def start(self, spawner_env):
        gstest.with_ports(lambda *ports: self._start(spawner_env, *ports), n=3)
        return self

    def _start(self, spawner_env, port, hub_port, api_port):
        self.port = port
        self.url = "http://127.0.0.1:%d" % self.port
        # notebook refuses to run as root unless told: CI may be root.
        args = ["--allow-root"] if os.geteuid() == 0 else []
        cfg = TEST_CONFIG.format(
            example=EXAMPLE, home=str(self.tmp / "home" / "{username}"), port=port,
            hub_port=hub_port, api_port=api_port,
            proxy_pid=str(self.tmp / "proxy.pid"), db=self.tmp / "hub.sqlite",
            secret=str(self.tmp / "cookie_secret"), python=gstest.PYTHON, args=args,
            env=spawner_env, kernelports_import=kernelports.import_lines())
        (self.tmp / "jupyterhub_config.py").write_text(cfg)
        if self.log:
            self.log.close()
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [gstest.PYTHON, "-m", "jupyterhub", "-f", "jupyterhub_config.py"], cwd=self.tmp,
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_until(self._up, timeout=180, what="the hub's API", interval=0.2)
        except gstest.PortInUse:
            gstest.kill_strays(keep=self.keep)  # a proxy the hub left behind
            raise

    def _up(self):
        if self.proc.poll() is not None:
            log = self.log_path.read_text()
            if gstest.port_clash(log):
                raise gstest.PortInUse(log)
            raise AssertionError("jupyterhub exited:\n" + log[-4000:])
        try:
            return requests.get(self.url + "/hub/api/", timeout=10).status_code == 200
        except requests.ConnectionError:
            return False

    def login(self, user):
        """Log in through the login form (which spawns the user's server) and
        take an API token with the session's cookie; returns the token once
        the server is ready."""
        s = requests.Session()
        r = s.post(self.url + "/hub/login", data={"username": user, "password": "any"},
                   timeout=60)
        assert r.status_code == 200 and "jupyterhub-session-id" in s.cookies, r.text[-2000:]
        # Hub 3 takes a cookie for its API only from its own pages (Referer).
        r = s.post(self.url + "/hub/api/users/%s/tokens" % user, json={"note": "test"},
                   headers={"Referer": self.url + "/hub/"}, timeout=60)
        assert r.status_code == 201, r.text
        token = r.json()["token"]
        wait_until(lambda: self.api("GET", "/hub/api/users/" + user, token)
                   .json()["servers"].get("", {}).get("ready"),
                   timeout=300, what=user + "'s server", interval=0.2)
        return token

    def api(self, method, path, token, **kw):
        return requests.request(method, self.url + path, timeout=60,
                                headers={"Authorization": "token " + token}, **kw)

    def stop(self):
        if self.proc:
            gstest.stop(self.proc, timeout=120)
            self.log.close()


# The exclusive policy, so that one notebook holds the GPU at a time; a
# quantum longer than the test, so that only a cell's end hands it on; the
# broker's event log records every grant.
pytestmark = pytest.mark.broker("--policy", "exclusive", "--tq", "3600")


@pytest.fixture
def hub(tmp_path, sim, broker):
    gstest.become_subreaper()
    # The kernels' environment: the simulated GPU, and this test's kernelspec
    # (the example names /usr/local's, where `make install` puts it).
    prefix = tmp_path / "prefix"
    gstest.install_kernelspec(prefix, sim)
    spawner_env = {k: sim[k] for k in sim if k.startswith("GPUSHARE_SIM") or k in (
        "LD_LIBRARY_PATH", "GPUSHARE_HOOK", "PYTHONPATH", "PYDEVD_DISABLE_FILE_VALIDATION")}
    spawner_env["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
    spawner_env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "singleuser-config")
    kernelports.server_config(spawner_env["JUPYTER_CONFIG_DIR"])
    # No idle release by the hook: on a loaded machine a holder's loop may
    # stall past it, and only a cell's end may hand the GPU on here.
    spawner_env["GPUSHARE_IDLE_RELEASE_MS"] = "0"
    # The hub itself: GPUSHARE_BROKER reaches the kernels through the
    # example's line.  NODE_PATH: a node not from Debian (nodesource's)
    # does not look in /usr/share/nodejs, where Debian's proxy's modules are.
    env = dict(sim, GPUSHARE_BROKER=broker.endpoint, NODE_PATH="/usr/share/nodejs")
    env.pop("JUPYTERHUB_USER", None)
    h = Hub(tmp_path, env, keep=[broker.proc.pid])
    try:
        yield h.start(spawner_env)
    finally:
        h.stop()
        strays = gstest.kill_strays(keep=[broker.proc.pid])
        if strays:
            print("killed what the hub left behind:", strays, file=sys.stderr)
        print("hub log: %s" % h.log_path, file=sys.stderr)


def test_two_hub_users_share_the_gpu_turn_by_turn(tmp_path, hub, broker):
    kernels = {}  # user -> (kernel id, channel, token)
    try:
        for user in USERS:
            token = hub.login(user)
            r = hub.api("POST", "/user/%s/api/kernels" % user, token, json={"name": "shared-gpu"})
            assert r.status_code == 201, r.text
            kid = r.json()["id"]
            ch = gstest.KernelChannel("ws://127.0.0.1:%d/user/%s/api/kernels/%s/channels" % (
                hub.port, user, kid), token)
            kernels[user] = (kid, ch, token)
            content, out, err = ch.run(SETUP)
            assert content["status"] == "ok", (content, err)
            assert out.strip() == "simulated True True", out + err
        # Two sessions, named by the kernels' ids, with the hub's user names.
        ss = broker.sessions()
        for user, (kid, _, _) in kernels.items():
            # the hub's user name, claimed beside the account that runs the server
            assert ss[kid].get("claimed_user", ss[kid]["user"]) == user, ss
            assert ss[kid]["kernel_id"] == kid, ss
            assert ss[kid]["grants"] >= 1

        # Contention: the holder's cell runs until its flag exists; the other
        # notebook's cell is queued behind it; the flag ends the holder's cell.
        first = len(broker.events("grant"))
        order = [USERS[i % 2] for i in range(ROUNDS + 1)]
        flag = lambda i: str(tmp_path / ("flag-%d" % i))  # noqa: E731
        holding = kernels[order[0]][1].execute("hold(%r)" % flag(0))
        kid0 = kernels[order[0]][0]
        wait_until(lambda: broker.sessions()[kid0]["state"] == "running", timeout=120,
                   what=order[0] + " holding the GPU")
        for i in range(ROUNDS):
            holder, waiter = kernels[order[i]], kernels[order[i + 1]]
            waiting = waiter[1].execute("hold(%r)" % flag(i + 1))
            wait_until(lambda: broker.sessions()[waiter[0]]["state"] == "waiting", timeout=120,
                       what=order[i + 1] + " waiting for the GPU")
            open(flag(i), "w").close()
            content, out, err = holder[1].reply(holding)
            assert content["status"] == "ok" and out.startswith("kernels "), (content, err)
            holding = waiting
        open(flag(ROUNDS), "w").close()
        assert kernels[order[-1]][1].reply(holding)[0]["status"] == "ok"

        # The grants of those rounds went alice, bob, alice, ...: each at a
        # cell's end (revoke reason cell_idle), never twice in a row.
        user_of = {kid: user for user, (kid, _, _) in kernels.items()}
        granted = [user_of[e["session"]] for e in broker.events("grant")[first:]]
        assert granted == order, granted
        revokes = [e["reason"] for e in broker.events("revoke")]
        assert revokes.count("cell_idle") >= ROUNDS, revokes
        status = broker.cli("status").stdout
        for user, (kid, _, _) in kernels.items():
            assert kid in status and user in status, status
        # Shutting the kernels down through the REST API ends their sessions.
        for user, (kid, _, token) in kernels.items():
            r = hub.api("DELETE", "/user/%s/api/kernels/%s" % (user, kid), token)
            assert r.status_code == 204, r.text
        try:
            wait_until(lambda: not broker.sessions(), timeout=120, what="the sessions to go")
        except AssertionError:
            raise AssertionError("sessions left: %s" % broker.sessions())
    finally:
        for _, ch, _ in kernels.values():
            ch.close()
