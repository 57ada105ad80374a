"""May the notebook server trust the broker's unix socket, and the process
listening on it?  The same checks as common/socket_trust.c (doc/security.md):

  - the path: every directory from / down to the socket's belongs to root,
    the user or the service account (GPUSHARE_BROKER_USER), and no one else
    may write to it, unless it is sticky (/tmp) and the entry below it is
    trusted too; the per-user directory must be the user's own, mode 0700;
  - connect(2) once, so that EACCES and a stale socket are named instead of
    becoming a timeout;
  - the listener's credentials (SO_PEERCRED), and later the same
    credentials on the welcome (peer_address_trusted).

A socket someone else could have put there would learn every kernel's id
and notebook, and could refuse to let them run.
"""
import errno
import grp
import os
import pwd
import socket
import stat
import struct


class Untrusted(Exception):
    """code: "unavailable" (no socket, a stale one, or not allowed to connect)
    or "untrusted" (the path or the listener is not to be trusted)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _service_uid():
    who = os.environ.get("GPUSHARE_BROKER_USER", "")
    if not who:
        return None
    if who.isdigit():
        return int(who)
    try:
        return pwd.getpwnam(who).pw_uid
    except KeyError:
        return None


def uid_trusted(uid):
    """Root, this process's user, or the service account."""
    return uid in (0, os.getuid(), os.geteuid()) or uid == _service_uid()


def _who(uid):
    try:
        return "uid %d (%s)" % (uid, pwd.getpwuid(uid).pw_name)
    except KeyError:
        return "uid %d" % uid


def _untrusted_owner(what, path, uid):
    return ("%s %s belongs to %s, not to you, root or the broker's service account "
            "(GPUSHARE_BROKER_USER)" % (what, path, _who(uid)))


def _check_dir(path, st, child):
    """Why the directory path (lstat st; child is the entry below it) is
    not to be trusted, or None."""
    if stat.S_ISLNK(st.st_mode):  # where it leads is walked too
        return None if uid_trusted(st.st_uid) else _untrusted_owner("symlink", path, st.st_uid)
    if not stat.S_ISDIR(st.st_mode):
        return "%s is not a directory" % path
    if not uid_trusted(st.st_uid):
        return _untrusted_owner("directory", path, st.st_uid)
    if not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    if not st.st_mode & stat.S_ISVTX:
        return ("directory %s is writable by others (mode %04o): anyone who may write there "
                "could replace the broker's socket" % (path, stat.S_IMODE(st.st_mode)))
    try:
        cst = os.lstat(child)
    except FileNotFoundError:
        return None
    if not uid_trusted(cst.st_uid):
        return _untrusted_owner("directory" if stat.S_ISDIR(cst.st_mode) else "file", child,
                                cst.st_uid)
    return None


def _walk(directory, leaf):
    parts = [p for p in directory.split("/") if p]
    prefixes = ["/"] + ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]
    for i, prefix in enumerate(prefixes):
        child = prefixes[i + 1] if i + 1 < len(prefixes) else leaf
        why = _check_dir(prefix, os.lstat(prefix), child)
        if why:
            return why
    return None


def path_problem(path, private_dir=False):
    """Why the socket path is not to be trusted, or None."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    try:
        why = _walk(directory, path)
        real = os.path.realpath(directory)
        if not why and real != directory:
            why = _walk(real, os.path.join(real, os.path.basename(path)))
        if why:
            return why
        if private_dir:
            st = os.stat(real)
            if st.st_uid not in (os.getuid(), os.geteuid()) or st.st_mode & 0o077:
                return ("the per-user socket directory %s must be yours with mode 0700, but "
                        "belongs to %s with mode %04o" % (real, _who(st.st_uid),
                                                          stat.S_IMODE(st.st_mode)))
        st = os.lstat(path)
        if not uid_trusted(st.st_uid):
            return _untrusted_owner("socket", path, st.st_uid)
    except FileNotFoundError:
        return None
    except OSError as e:
        return "cannot check %s: %s" % (e.filename or path, e.strerror)
    return None


def _denied_hint(st):
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    if st.st_mode & 0o020 and not st.st_mode & 0o002:
        return "not in group %s?" % group
    return "socket mode %04o, group %s" % (stat.S_IMODE(st.st_mode), group)


def probe(path, private_dir=False):
    """Check the path, connect once and check who listens.  Raises
    Untrusted with a message naming the problem."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Untrusted("unavailable", "no broker is running at ipc://%s (no socket file)" % path)
    except PermissionError:
        raise Untrusted("unavailable", "permission denied: cannot reach %s" % path)
    if not stat.S_ISSOCK(st.st_mode):
        raise Untrusted("untrusted", "%s is not a socket" % path)
    why = path_problem(path, private_dir)
    if why:
        raise Untrusted("untrusted", "refusing the broker socket %s: %s" % (path, why))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        try:
            s.connect(path)
        except (BlockingIOError, InterruptedError):
            return  # its backlog is full: someone listens; the welcome is checked too
        except PermissionError:
            raise Untrusted("unavailable", "permission denied: cannot connect to %s (%s)" %
                            (path, _denied_hint(st)))
        except ConnectionRefusedError:
            raise Untrusted("unavailable", "broker not running (stale socket %s, left by a "
                            "broker that stopped without removing it)" % path)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EINPROGRESS):
                return
            raise Untrusted("unavailable", "cannot connect to %s: %s" % (path, e.strerror))
        cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", cred)
        if not uid_trusted(uid):
            raise Untrusted("untrusted", "refusing the broker at %s: it runs as %s, not as you, "
                            "root or the service account (GPUSHARE_BROKER_USER)" %
                            (path, _who(uid)))
    finally:
        s.close()


def peer_address_trusted(peer_address, endpoint):
    """The Peer-Address libzmq attached to the broker's welcome
    ("addr:uid:gid:pid") names a trusted uid.  Raises Untrusted."""
    fields = (peer_address or "").rsplit(":", 3)
    if len(fields) != 4 or not fields[1].isdigit():
        raise Untrusted("untrusted", "refusing the broker at %s: its messages carry no "
                        "credentials" % endpoint)
    uid = int(fields[1])
    if not uid_trusted(uid):
        raise Untrusted("untrusted", "refusing the broker at %s: it runs as %s, not as you, "
                        "root or the service account (GPUSHARE_BROKER_USER)" %
                        (endpoint, _who(uid)))
