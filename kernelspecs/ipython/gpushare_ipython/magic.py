"""%gpushare, the line magic:

    %gpushare [status]        this notebook's session on its GPUs (state,
                              grants, GPU time, time waited, memory
                              resident and parked) and the other notebooks
                              there, as a table
    %gpushare release         give the GPU back now and park this
                              notebook's memory in host memory when the cell
                              ends (the next cell that uses the GPU brings it
                              back)
    %gpushare wait [off|on|SECONDS]
                              the wait line: off, on (after 1 s), after
                              SECONDS; without an argument, what it is
    %gpushare help            this text

The status comes from the broker (`status`, what `gpushare status --json`
shows; other users' notebooks are named only where the broker's
show_others allows it), the release from the hook
(gpushare_hook_release) and the broker (`park`)."""
import html
import os

from .waitline import safe_text
import os

from . import broker
from .waitline import parse_threshold

USAGE = "\n".join(line[4:] for line in __doc__.split("\n\n")[1].splitlines())


def _size(n):
    n = n or 0
    if n >= 1 << 30:
        return "%.1f GiB" % (n / (1 << 30))
    if n >= 1 << 20:
        return "%.1f MiB" % (n / (1 << 20))
    return "%d B" % n if n < 1024 else "%.1f KiB" % (n / 1024)


def _secs(s):
    return "%.1f s" % (s or 0)


def _notebook(e):
    if e.get("anonymous"):
        return "another notebook"
    nb = e.get("notebook") or ""
    return os.path.basename(nb) or nb or "another notebook"  # its server did not say


def _state(e):
    st = e.get("state", "?")
    if e.get("park_asked"):
        st += ", parked once idle"
    elif e.get("parking") not in (None, "resident", "parked"):
        st += " (%s)" % e["parking"]
    return st


COLUMNS = ["GPU", "notebook", "user", "state", "grants", "GPU time", "waited", "resident",
           "parked"]


def is_mine(e, session):
    """Whether status entry e is this kernel's session: names belong to
    their user (the id of another user's session is NAME@UID), so the name
    and, where the status shows it, the uid must both be this process'."""
    uid = e.get("uid")
    return e.get("name", e.get("id")) == session and (uid is None or uid == os.getuid())


def rows_of(status, session):
    """(rows, mine_found): this session's rows first, then the others on
    the GPUs it uses (all GPUs it is listed on when it used none yet)."""
    gpus = status.get("gpus", [])
    mine = [(g, e) for g in gpus for e in g.get("sessions", []) if is_mine(e, session)]
    used = [(g, e) for g, e in mine if e.get("grants") or e.get("resident_bytes")
            or e.get("parked_bytes")]
    shown = {g.get("index") for g, _ in (used or mine)} or {g.get("index") for g in gpus}
    rows = []
    for g, e in used or mine:
        rows.append((True, [str(g.get("index")), "this notebook", e.get("user", ""), _state(e),
                            str(e.get("grants", 0)), _secs(e.get("gpu_time_s")),
                            _secs(e.get("wait_time_s")), _size(e.get("resident_bytes")),
                            _size(e.get("parked_bytes"))]))
    for g in gpus:
        if g.get("index") not in shown:
            continue
        for e in g.get("sessions", []):
            if is_mine(e, session):
                continue
            rows.append((False, [str(g.get("index")), _notebook(e), e.get("user", ""), _state(e),
                                 str(e.get("grants", 0)), _secs(e.get("gpu_time_s")),
                                 _secs(e.get("wait_time_s")), _size(e.get("resident_bytes")),
                                 _size(e.get("parked_bytes"))]))
    return rows, bool(mine), sorted(i for i in shown if i is not None)


def _gpu_lines(status, shown):
    out = []
    for g in status.get("gpus", []):
        if g.get("index") in shown:
            out.append("GPU %s: %s, %s, %s in use, %s parked in host memory" % (
                g.get("index"), g.get("name", "?"), _size(g.get("memory_total")),
                _size(g.get("memory_used")), _size(g.get("memory_parked"))))
    return out


def render_status(status, session, wait_setting):
    """(text/plain, text/html) of the status table."""
    rows, found, shown = rows_of(status, session)
    head = "gpushare: this notebook (session %s)" % session if session else \
        "gpushare: this kernel has no session (not started by the Shared GPU kernel)"
    if session and not found:
        head += " is not known to the broker"
    notes = _gpu_lines(status, shown)
    notes.append("policy %s; wait line: %s" % (status.get("policy", "?"), wait_setting))
    if status.get("config", {}).get("show_others") == "anonymous":
        notes.append("other users' notebooks are not named here (show_others = anonymous)")
    widths = [max(len(c), *(len(r[i]) for _, r in rows)) if rows else len(c)
              for i, c in enumerate(COLUMNS)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa
    # Other users' notebook names reach this table: none of their control
    # characters does (the broker replaces them too; this is the second line).
    rows = [(me, [safe_text(c) for c in r]) for me, r in rows]
    notes = [safe_text(n) for n in notes]
    text = "\n".join([head, line(COLUMNS)] + [line(r) for _, r in rows] + notes)
    th = "".join("<th style='text-align:left'>%s</th>" % html.escape(c) for c in COLUMNS)
    trs = "".join("<tr%s>%s</tr>" % (" style='font-weight:bold'" if me else "",
                                     "".join("<td style='text-align:left'>%s</td>" % html.escape(c)
                                             for c in r)) for me, r in rows)
    page = ("<div class='gpushare-status'><div>%s</div><table><thead><tr>%s</tr></thead>"
            "<tbody>%s</tbody></table>%s</div>" % (
                html.escape(head), th, trs,
                "".join("<div style='font-size:90%%;color:#666'>%s</div>" % html.escape(n)
                        for n in notes)))
    return text, page


class Magic:
    def __init__(self, hook, wait, display):
        self.hook = hook
        self.wait = wait
        self.display = display  # display(bundle) for a raw mime bundle

    def wait_setting(self):
        t = self.wait.threshold
        if self.hook is None:
            return "off (this kernel runs without the gpushare hook)"
        return "off" if t is None else "after %g s" % t

    def __call__(self, line):
        args = line.split()
        cmd = args[0] if args else "status"
        if cmd == "status" and len(args) <= 1:
            return self.status()
        if cmd == "release" and len(args) == 1:
            return self.release()
        if cmd == "wait" and len(args) <= 2:
            return self.set_wait(args[1] if len(args) == 2 else None)
        if cmd not in ("help", "-h", "--help"):
            print("%%gpushare: unknown arguments %r\n" % line.strip())
        print(USAGE)

    def status(self):
        session = os.environ.get("GPUSHARE_SESSION")
        try:
            reply = broker.call("status")
        except broker.Unavailable as e:
            print("gpushare: no broker at %s (%s): this notebook runs without sharing." % (
                broker.endpoint(), e))
            return
        text, page = render_status(reply.get("status", {}), session, self.wait_setting())
        self.display({"text/plain": text, "text/html": page})

    def release(self):
        session = os.environ.get("GPUSHARE_SESSION")
        n = self.hook.release() if self.hook is not None else 0
        if n:
            print("gpushare: the GPU is handed back (%d GPU%s); the next GPU work asks for it "
                  "again." % (n, "" if n == 1 else "s"))
        else:
            print("gpushare: this notebook holds no GPU right now.")
        if not session:
            print("gpushare: this kernel has no session (not started by the Shared GPU kernel): "
                  "nothing to park.")
            return
        try:
            info = broker.call("park", session=session).get("info", "")
        except broker.Unavailable as e:
            if e.code == "not_parkable":
                print("gpushare: its memory stays on the GPU: %s" % e)
            else:
                print("gpushare: no broker at %s (%s): nothing to park." % (broker.endpoint(), e))
            return
        if info.startswith("parking "):
            info += "; the next cell that uses the GPU brings it back"
        print("gpushare: %s." % info)

    def set_wait(self, arg):
        if arg is not None:
            try:
                self.wait.set_threshold(parse_threshold(arg))
            except ValueError:
                print("%%gpushare wait: expected off, on or a number of seconds, not %r" % arg)
                return
        print("gpushare: the wait line is %s." % self.wait_setting())
