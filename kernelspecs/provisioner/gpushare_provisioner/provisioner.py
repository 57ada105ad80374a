"""GpushareProvisioner: LocalProvisioner plus gpushare's identity variables
and broker registration (see the package docstring)."""
import asyncio
import getpass
import os
import sys

from jupyter_client.provisioning import LocalProvisioner
from traitlets import Float, Unicode

from .broker_client import BrokerClient, BrokerError, broker_endpoint


def _user(env):
    for name in ("GPUSHARE_USER", "JUPYTERHUB_USER"):
        if env.get(name):
            return env[name]
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry
        return "uid %d" % os.getuid()


# The servers whose session table knows a kernel's notebook: (module,
# application class).  Looked up in sys.modules only: the provisioner runs
# inside the server that imported them, and imports no server itself.
_SERVER_APPS = (("jupyter_server.serverapp", "ServerApp"), ("notebook.notebookapp", "NotebookApp"))


def _server_apps():
    """The notebook server applications initialized in this process (none
    under nbclient, papermill or a bare KernelManager)."""
    for module, cls_name in _SERVER_APPS:
        cls = getattr(sys.modules.get(module), cls_name, None)
        try:
            if cls is not None and cls.initialized():
                yield cls.instance()
        except Exception:  # another server's layout
            continue


def _in_server():
    return any(True for _ in _server_apps())


def _server_notebook_path(kernel_id):
    """The path of the notebook whose session runs kernel_id, from the
    session table of the notebook server this provisioner runs in
    (jupyter_server, notebook 6: a table `session` with `path` and
    `kernel_id`), or None."""
    for app in _server_apps():
        try:
            cursor = getattr(getattr(app, "session_manager", None), "cursor", None)
            if cursor is None:
                continue
            row = cursor.execute("SELECT path FROM session WHERE kernel_id=?",
                                 (kernel_id,)).fetchone()
        except Exception:  # another server's layout: no path rather than no kernel
            continue
        if row and row[0]:
            return row[0]
    return None


class GpushareProvisioner(LocalProvisioner):
    """Starts a kernel locally, tells gpushare-broker about it."""

    broker = Unicode("", config=True,
                     help="Broker endpoint (ipc://PATH or a path); default: "
                          "GPUSHARE_BROKER of the kernel's environment, else the "
                          "per-user, then the system broker.")
    broker_timeout = Float(0.5, config=True,
                           help="Seconds to wait for each broker reply (a missing "
                                "broker's socket is not waited for at all).")
    notebook_wait = Float(10.0, config=True,
                          help="Seconds to look for the kernel's notebook in the server's "
                               "session table when the server does not pass JPY_SESSION_NAME "
                               "(notebook 6 saves the session once the kernel has started).")

    _warned = False  # one warning per server process about a missing broker
    _noted = set()  # the per-user sockets passed over, each said once
    _env = None
    _session = None
    _path_task = None

    async def pre_launch(self, **kwargs):
        kwargs = await super().pre_launch(**kwargs)
        env = kwargs.setdefault("env", {})
        env["GPUSHARE_KERNEL_ID"] = self.kernel_id
        env["GPUSHARE_USER"] = _user(env)
        # JPY_SESSION_NAME is set by servers that know the notebook's path
        # (jupyter_server 2); it stays as the server put it.
        self._env = dict(env)
        return kwargs

    async def post_launch(self, **kwargs):
        await super().post_launch(**kwargs)
        await self._register()
        # Only a server has a session table to look in: without one
        # (nbclient, papermill) there is nothing to wait for.
        if self._session and not (self._env or {}).get("JPY_SESSION_NAME") and _in_server():
            self._path_task = asyncio.ensure_future(self._register_notebook_path())

    async def _register_notebook_path(self):
        """Notebook 6 and jupyter_server 1 do not tell a kernel its
        notebook; their session table does, once the session is saved (right
        after the kernel started).  The broker learns it from a second
        register (a register without a notebook keeps the one it knows)."""
        loop = asyncio.get_event_loop()
        deadline = loop.time() + self.notebook_wait
        while loop.time() < deadline and self._session:
            path = _server_notebook_path(self.kernel_id)
            if path:
                await self._register(notebook=path)
                return
            await asyncio.sleep(0.1)

    async def cleanup(self, restart=False):
        task, self._path_task = self._path_task, None
        if task and not task.done():
            task.cancel()
            # Wait for it to end: a task left cancelling when its loop
            # closes is reported as "Task was destroyed but it is pending".
            if task.get_loop() is asyncio.get_running_loop():
                await asyncio.gather(task, return_exceptions=True)
        await super().cleanup(restart=restart)
        await self._unregister()

    # ---- broker -------------------------------------------------------------

    def _endpoint(self):
        if self.broker:
            return self.broker
        notes = []
        endpoint = broker_endpoint(self._env or os.environ, notes)
        for note in notes:
            if note not in GpushareProvisioner._noted:
                GpushareProvisioner._noted.add(note)
                self.log.warning("gpushare: %s", note)
        return endpoint

    def _client(self):
        from . import __version__
        return BrokerClient(self._endpoint(), role="provisioner", session=self.kernel_id,
                            timeout=self.broker_timeout, client_version=__version__)

    def _broker_missing(self, err):
        if not GpushareProvisioner._warned:
            GpushareProvisioner._warned = True
            self.log.warning("gpushare: no broker (%s); kernels run without GPU scheduling "
                             "until one is started", err)
        else:
            self.log.debug("gpushare: no broker (%s)", err)

    async def _register(self, notebook=None):
        env = self._env or {}
        client = self._client()
        try:
            session = await client.register(self.kernel_id, _user(env), self.pid,
                                            notebook=notebook or env.get("JPY_SESSION_NAME"))
        except BrokerError as e:
            if e.code in ("unavailable", "timeout", "untrusted"):
                self._broker_missing(e)
            else:
                self.log.warning("gpushare: the broker refused to register kernel %s: %s",
                                 self.kernel_id, e)
            return
        finally:
            client.close()
        if session != self.kernel_id:
            self.log.warning("gpushare: the broker named kernel %s's session %r", self.kernel_id,
                             session)
        self._session = session
        self.log.debug("gpushare: kernel %s registered as session %s", self.kernel_id, session)

    async def _unregister(self):
        session, self._session = self._session, None
        if not session:
            return
        client = self._client()
        try:
            await client.unregister(session)
            self.log.debug("gpushare: session %s unregistered", session)
        except BrokerError as e:
            # unknown_session: the launcher's watcher was faster.
            if e.code not in ("unknown_session",):
                self.log.debug("gpushare: unregister %s: %s", session, e)
        finally:
            client.close()

    async def get_provisioner_info(self):
        info = await super().get_provisioner_info()
        info["gpushare_session"] = self._session
        return info

    async def load_provisioner_info(self, provisioner_info):
        await super().load_provisioner_info(provisioner_info)
        self._session = provisioner_info.get("gpushare_session")
