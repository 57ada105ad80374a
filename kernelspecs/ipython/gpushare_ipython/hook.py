"""The hook (libgpushare-hook.so) as seen from Python: the launcher preloads
it into the kernel, so its exported functions are in the process's global
scope, where ctypes.CDLL(None) finds them (gpushare_hook.h)."""
import ctypes
import json


class Hook:
    """gpushare_hook_wait_state, gpushare_hook_wait_notices and
    gpushare_hook_release; Hook.find() is None when the process runs
    without the hook (not a Shared GPU kernel, or an older hook)."""

    def __init__(self, lib):
        self._state = lib.gpushare_hook_wait_state
        self._state.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self._state.restype = ctypes.c_int
        self._notices = lib.gpushare_hook_wait_notices
        self._notices.argtypes = [ctypes.c_int]
        self._notices.restype = ctypes.c_int
        self._release = lib.gpushare_hook_release
        self._release.argtypes = []
        self._release.restype = ctypes.c_int
        self._size = 4096

    @classmethod
    def find(cls):
        try:
            return cls(ctypes.CDLL(None))
        except (AttributeError, OSError):
            return None

    def wait_state(self):
        """What the process waits for (the object gpushare_hook.h
        describes), or None."""
        for _ in range(4):
            buf = ctypes.create_string_buffer(self._size)
            n = self._state(buf, self._size)
            if n < 0:
                return None
            if n < self._size:
                return json.loads(buf.value.decode("utf-8", "replace"))
            self._size = n + 1
        return None

    def notices(self, on):
        """The hook's own wait notice on stderr on or off; the previous
        setting."""
        return bool(self._notices(1 if on else 0))

    def release(self):
        """Every grant the process holds goes back now; how many GPUs."""
        return self._release()
