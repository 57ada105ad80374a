"""The wait line: while a cell's GPU work waits longer than a moment, the
cell's output shows one line saying why (another notebook holds the GPU;
this notebook's memory comes back from host memory; the GPU is full and
room is being made), for whom and for how long so far, updated in place;
when the wait ends it turns into a one-line summary.

During each cell a thread asks the hook what the process waits for (every
POLL_S seconds; gpushare_hook_wait_state(), no CUDA call) and shows the
line with IPython's display(..., display_id=...) and updates it with
update_display_data.  ipykernel sends a display from any thread with the
parent of the request it is executing, which is the cell's until its
post_run_cell, where the thread is stopped and the summary is written on
the main thread.

A thread needs Python's GIL: a program that holds it while it waits in
CUDA (PyTorch releases it around its operators, ctypes around its calls)
shows the line only when it returns."""
import html
import math
import re
import threading

from .log import warn_once

POLL_S = 0.2
DEFAULT_THRESHOLD = 1.0
ENV = "GPUSHARE_WAIT_LINE"


def parse_threshold(text):
    """'off' -> None, 'on' -> the default, a number of seconds (>= 0) ->
    that; ValueError otherwise."""
    t = str(text).strip().lower()
    if t in ("off", "no", "false"):
        return None
    if t in ("on", "yes", "true", ""):
        return DEFAULT_THRESHOLD
    t = t[:-1].strip() if t.endswith("s") else t
    v = float(t)
    if not math.isfinite(v) or v < 0:
        raise ValueError(text)
    return v


# C0 controls (newline, escape, ...), DEL and C1 controls: what a terminal or
# a log viewer obeys rather than shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def safe_text(text):
    """text with every control character replaced by '?': other users'
    notebook names reach the wait line (issue 34), and must not forge lines
    or send escape sequences."""
    return _CONTROL.sub("?", str(text))


def _gb(n):
    return "%.1f GB" % (n / 1e9)


def _duration(seconds):
    """12 s, 5 min, 2 h: as long as a user cares to read."""
    seconds = max(0, math.ceil(seconds))
    if seconds < 120:
        return "%d s" % seconds
    if seconds < 7200:
        return "%d min" % math.ceil(seconds / 60)
    return "%d h" % math.ceil(seconds / 3600)


def _device_name(d, ndev):
    return "GPU %d" % d.get("gpu", 0) if ndev > 1 else "the GPU"


def why_waiting(d):
    """Why device entry d waits, in words."""
    state = d.get("state")
    if state == "gpu":
        holder = d.get("holder")
        if holder:
            left = d.get("left_s")
            if left is None:
                return "held by %s until its cell ends" % holder
            return "held by %s for at most %s more" % (holder, _duration(left))
        return d.get("info") or "held by another notebook"
    if state == "swap_in":
        total = d.get("total_bytes", 0)
        done = min(d.get("done_bytes", 0), total) if total else d.get("done_bytes", 0)
        pct = " (%d%%)" % (100 * done // total) if total else ""
        return "this notebook's memory is coming back from host memory: %s of %s%s" % (
            _gb(done), _gb(total), pct)
    if state == "parked":
        return "this notebook's memory is in host memory and comes back when the GPU has room"
    if state == "room":
        if d.get("info"):  # the broker said why the room does not come yet
            return "%s needed: %s" % (_gb(d.get("room_bytes", 0)), d["info"])
        return ("the GPU is full: room is being made for %s (idle notebooks' memory goes to "
                "host memory)" % _gb(d.get("room_bytes", 0)))
    return "waiting"


def why_waited(d):
    """What a wait was for, for the summary."""
    state = d.get("state")
    if state == "gpu":
        return "held by %s" % d["holder"] if d.get("holder") else (
            d.get("info") or "held by another notebook")
    if state == "swap_in":
        return "memory back from host memory (%s)" % _gb(d.get("total_bytes", 0))
    if state == "parked":
        return "memory waited in host memory for room"
    if state == "room":
        if d.get("room_error"):  # the allocation failed as native CUDA would, and why
            return "no room for %s: %s" % (_gb(d.get("room_bytes", 0)), d["room_error"])
        return "room made on the GPU for %s" % _gb(d.get("room_bytes", 0))
    return "waiting"


def _bundle(text, done):
    css = ("font-family: monospace; font-size: 90%%; padding: 2px 0; color: %s;" %
           ("#666" if done else "#8a5a00"))
    cls = "gpushare-wait gpushare-wait-done" if done else "gpushare-wait"
    return {"text/plain": text,
            "text/html": '<div class="%s" style="%s">%s</div>' % (cls, css, html.escape(text))}


def render_waiting(waits, ndev):
    """The line for the device entries that wait (long enough)."""
    lines = ["Waiting for %s for %d s: %s" % (_device_name(d, ndev), int(d.get("for_s", 0)),
                                              safe_text(why_waiting(d))) for d in waits]
    return "\n".join(lines)


def render_summary(seconds, reasons):
    text = "Waited %.1f s for the GPU" % seconds
    if reasons:
        text += ": " + "; ".join(safe_text(r) for r in reasons)
    return text


def _totals(state):
    """{gpu: waited_s} of a wait state."""
    return {d.get("gpu"): d.get("waited_s", 0.0) for d in (state or {}).get("devices", [])}


class CellWatch:
    """One cell's wait line: a thread that polls the hook, and the display
    it owns."""

    def __init__(self, hook, threshold, display, start=True):
        self.hook = hook
        self.threshold = threshold
        self.display = display  # display(bundle, raw=True, display_id=True) -> handle
        self.base = _totals(hook.wait_state())
        self.handle = None
        self.shown = None
        self.reasons = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gpushare-wait-line", daemon=True)
        if start:  # (not started: a test calls poll() itself)
            self.thread.start()

    def _run(self):
        try:
            while not self.stop.wait(POLL_S):
                self.poll()
        except Exception as e:  # the line stops; the cell goes on
            warn_once("poll", "the wait line stopped: %r" % (e,))

    def _show(self, text, done=False):
        with self.lock:
            if text == self.shown:
                return
            bundle = _bundle(text, done)
            if self.handle is None:
                self.handle = self.display(bundle)
            else:
                self.handle.update(bundle, raw=True)
            self.shown = text

    def waited(self, state):
        """Seconds this cell has waited so far (ended and ongoing waits)."""
        total = 0.0
        for d in state.get("devices", []):
            total += max(0.0, d.get("waited_s", 0.0) - self.base.get(d.get("gpu"), 0.0))
            if d.get("state", "none") != "none":
                total += d.get("for_s", 0.0)
        return total

    def _outcome(self, state):
        """The reasons for the summary: a wait for room this cell had that
        ended in failure says so, and why (the hook's room_error)."""
        failed = {d.get("gpu"): d["room_error"] for d in state.get("devices", [])
                  if d.get("room_error")}
        if not failed:
            return self.reasons
        return ["no room: %s" % "; ".join(failed.values()) if r.startswith("room made") else r
                for r in self.reasons]

    def poll(self):
        state = self.hook.wait_state()
        if not state:
            return
        devs = state.get("devices", [])
        waits = [d for d in devs if d.get("state", "none") != "none"]
        long_ones = [d for d in waits if d.get("for_s", 0.0) >= self.threshold]
        if long_ones:
            for d in long_ones:
                why = why_waited(d)
                if why not in self.reasons:
                    self.reasons.append(why)
            self._show(render_waiting(long_ones, len(devs)))
        elif self.handle is not None and not waits:
            self._show(render_summary(self.waited(state), self._outcome(state)), done=True)

    def finish(self):
        """At the cell's end, on the kernel's main thread: the thread stops
        and a line that was shown becomes the summary."""
        self.stop.set()
        if self.thread.ident is not None:
            self.thread.join(5)
        if self.handle is not None:
            state = self.hook.wait_state() or {}
            self._show(render_summary(self.waited(state), self._outcome(state)), done=True)


class WaitLine:
    """The wait line's settings and the cell being watched."""

    def __init__(self, hook, display, env):
        self.hook = hook
        self.display = display
        self.cell = None
        self.threshold = DEFAULT_THRESHOLD
        if env.get(ENV) is not None:
            try:
                self.threshold = parse_threshold(env[ENV])
            except ValueError:
                warn_once("env", "ignoring %s=%r (expected on, off or seconds)" % (ENV, env[ENV]))

    @property
    def active(self):
        return self.hook is not None and self.threshold is not None

    def set_threshold(self, threshold):
        self.threshold = threshold

    def pre_run_cell(self, *args):
        try:
            self.finish()  # a cell whose end was not seen
            if self.active:
                self.cell = CellWatch(self.hook, self.threshold, self.display)
        except Exception as e:
            warn_once("pre", "the wait line is off for a cell: %r" % (e,))

    def post_run_cell(self, *args):
        try:
            self.finish()
        except Exception as e:
            warn_once("post", "the wait line could not end: %r" % (e,))

    def finish(self):
        cell, self.cell = self.cell, None
        if cell is not None:
            cell.finish()
