"""gpushare_ipython: what sharing the GPU does to a notebook's cells, shown
in the notebook.  The "Shared GPU" kernelspec loads it into every kernel
(ipykernel's --ext=gpushare_ipython); by hand: %load_ext gpushare_ipython.

* The wait line (waitline.py): while a cell's GPU work waits longer than a
  moment (1 s; GPUSHARE_WAIT_LINE=off|on|SECONDS in the kernel's
  environment, or %gpushare wait), its output shows why and for how long,
  updated in place, and a one-line summary once the wait is over.  The
  hook's own notice on stderr is off meanwhile.
* %gpushare (magic.py): this notebook's session and the others on its GPU
  as a table (%gpushare status), give the GPU back and park this notebook's
  memory now (%gpushare release), the wait line (%gpushare wait off|on|S).

It reads the preloaded hook's state through ctypes (hook.py) and never
makes a CUDA call.  It must never break a kernel: every failure is caught
and said once in the kernel's log (log.py), and a kernel without the hook
(not started through gpushare-launch) only has nothing to show.
"""
import os

from .log import warn_once

__version__ = "0.1.0"

_loaded = None


class _Extension:
    def __init__(self, ip):
        from .hook import Hook
        from .magic import Magic
        from .waitline import WaitLine

        self.ip = ip
        self.hook = Hook.find()
        self.was_notices = None
        self.wait = WaitLine(self.hook, self._display, os.environ)
        if self.hook is not None:
            self.was_notices = self.hook.notices(False)  # the wait line says it instead
        ip.events.register("pre_run_cell", self.wait.pre_run_cell)
        ip.events.register("post_run_cell", self.wait.post_run_cell)
        self.magic = Magic(self.hook, self.wait, self._show)
        ip.register_magic_function(self._gpushare, "line", "gpushare")

    def _gpushare(self, line=""):
        """%gpushare [status | release | wait off|on|SECONDS | help]: this
        notebook's share of the GPU (see %gpushare help)."""
        try:
            self.magic(line)
        except Exception as e:  # a magic that fails must not look like the user's error
            warn_once("magic", "%%gpushare failed: %r" % (e,))
            print("gpushare: %%gpushare failed (%s); the kernel's log says more." % (e,))

    @staticmethod
    def _display(bundle):
        from IPython.display import display
        return display(bundle, raw=True, display_id=True)

    @staticmethod
    def _show(bundle):
        from IPython.display import display
        display(bundle, raw=True)

    def unload(self):
        for name, fn in (("pre_run_cell", self.wait.pre_run_cell),
                         ("post_run_cell", self.wait.post_run_cell)):
            try:
                self.ip.events.unregister(name, fn)
            except ValueError:
                pass
        self.wait.finish()
        self.ip.magics_manager.magics["line"].pop("gpushare", None)
        if self.hook is not None and self.was_notices is not None:
            self.hook.notices(self.was_notices)


def load_ipython_extension(ip):
    global _loaded
    if _loaded is not None:
        return
    try:
        _loaded = _Extension(ip)
    except Exception as e:
        warn_once("load", "not loaded: %r" % (e,))


def unload_ipython_extension(ip):
    global _loaded
    ext, _loaded = _loaded, None
    if ext is not None:
        try:
            ext.unload()
        except Exception as e:
            warn_once("unload", "unloading failed: %r" % (e,))
