"""Where the extension says what went wrong: the kernel's own stderr (the
notebook server's log), never the notebook.  ipykernel points file
descriptor 2 into the cell's output and keeps the real one aside; each
problem is said once per kernel, and nothing here ever raises."""
import os
import sys

_said = set()


def _real_stderr_fd():
    fd = getattr(sys.stderr, "_original_stdstream_copy", None)
    if isinstance(fd, int):
        return fd
    try:
        return sys.__stderr__.fileno()
    except Exception:
        return None


def warn_once(key, text):
    """Writes 'gpushare_ipython: warn: text' to the kernel's log, the first
    time only for this key."""
    if key in _said:
        return
    _said.add(key)
    try:
        fd = _real_stderr_fd()
        if fd is not None:
            os.write(fd, ("gpushare_ipython[%d]: warn: %s\n" % (os.getpid(), text)).encode())
    except Exception:
        pass
