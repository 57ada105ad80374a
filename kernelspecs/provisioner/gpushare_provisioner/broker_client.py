"""A tiny asyncio client of gpushare-broker's wire protocol (doc/protocol.md):
hello, register, unregister.

One JSON object per ZeroMQ frame on a DEALER socket, replies matched by
`seq`.  Every call has a deadline (default 0.5 s), and a broker whose ipc
socket file does not exist, or is stale, is not waited for at all, so a
notebook server never stalls on a missing broker.  The endpoint rule is
common/endpoint.c's: GPUSHARE_BROKER, else the per-user socket when it
exists in the user's own 0700 directory, else the system socket.  Only
ipc:// exists: the broker knows who a client is from the unix socket's
credentials, which TCP does not carry.  Before connecting, the socket is
checked (socket_trust.py), and the welcome must come from root, the user or
the service account.
"""
import asyncio
import json
import os

import zmq
import zmq.asyncio

from .socket_trust import Untrusted, path_problem, peer_address_trusted, probe

PROTOCOL_VERSION = 1
SYSTEM_SOCKET = "/run/gpushare/broker.sock"
MAX_FRAME = 1024 * 1024  # the protocol's frame limit: a larger one drops the link


class BrokerError(Exception):
    """The broker is missing, did not answer in time, or refused a request
    (.code is the broker's error code, or "unavailable" / "timeout")."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


def normalise(endpoint):
    """ipc:// passes; a bare path becomes ipc://PATH; tcp:// is refused."""
    if endpoint.startswith("ipc://"):
        return endpoint
    if endpoint.startswith("tcp://"):
        raise ValueError("broker endpoint %r: tcp:// is not supported: the broker identifies "
                         "clients by their unix socket credentials, which TCP does not carry; "
                         "use an ipc:// path" % endpoint)
    if "://" in endpoint:
        raise ValueError("broker endpoint %r: only ipc:// is supported" % endpoint)
    return "ipc://" + endpoint


def user_socket(env=None):
    """The per-user broker's socket path for environment env."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_RUNTIME_DIR")
    return (os.path.join(xdg, "gpushare", "broker.sock") if xdg
            else "/tmp/gpushare-%d/broker.sock" % os.getuid())


def broker_endpoint(env=None, notes=None):
    """Where the broker listens, for a client with environment env.  A
    per-user socket passed over because its directory is not the user's
    own is explained in the list notes."""
    env = os.environ if env is None else env
    given = env.get("GPUSHARE_BROKER")
    if given:
        return normalise(given)
    user = user_socket(env)
    if os.path.lexists(user):
        why = path_problem(user, private_dir=True)
        if not why:
            return "ipc://" + user
        if notes is not None:
            notes.append("ignoring %s: %s" % (user, why))
    return "ipc://" + SYSTEM_SOCKET


class BrokerClient:
    """One connection: hello once, then requests with deadlines."""

    def __init__(self, endpoint, role="provisioner", session=None, timeout=0.5,
                 client_version=None):
        self.endpoint = normalise(endpoint)
        self.role = role
        self.session = session
        self.timeout = timeout
        self.client_version = client_version
        self.sock = None
        self.seq = 0
        self.welcome = None

    def _check_reachable(self):
        path = self.endpoint[len("ipc://"):]
        try:
            probe(path, private_dir=path == user_socket())
        except Untrusted as e:
            raise BrokerError(e.code, str(e))

    def _msg(self, type_, **fields):
        self.seq += 1
        msg = {"v": PROTOCOL_VERSION, "type": type_, "seq": self.seq}
        msg.update({k: v for k, v in fields.items() if v is not None})
        return msg

    async def _send(self, msg):
        await self.sock.send(json.dumps(msg, separators=(",", ":")).encode())

    async def _reply(self, seq, deadline, check_peer=False):
        loop = asyncio.get_running_loop()
        while True:
            left = deadline - loop.time()
            if left <= 0 or not await self.sock.poll(left * 1000, zmq.POLLIN):
                raise BrokerError("timeout", "no reply from the broker at %s within %.1f s" %
                                  (self.endpoint, self.timeout))
            frame = await self.sock.recv(copy=False)
            try:
                msg = json.loads(frame.bytes)
            except ValueError:
                continue
            if not isinstance(msg, dict) or msg.get("seq") != seq:
                continue  # a late reply to an earlier request
            if check_peer:
                try:
                    peer_address_trusted(frame.get("Peer-Address"), self.endpoint)
                except Untrusted as e:
                    raise BrokerError(e.code, str(e))
            if msg.get("type") == "error":
                raise BrokerError(msg.get("code", "error"), msg.get("message", ""))
            return msg

    async def connect(self):
        """hello -> welcome.  Raises BrokerError."""
        self._check_reachable()
        ctx = zmq.asyncio.Context.instance()
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)
        self.sock.connect(self.endpoint)
        hello = self._msg("hello", role=self.role, pid=os.getpid(), session=self.session,
                          client_version=self.client_version)
        deadline = asyncio.get_running_loop().time() + self.timeout
        await self._send(hello)
        try:
            self.welcome = await self._reply(hello["seq"], deadline, check_peer=True)
        except BaseException:
            self.close()
            raise
        return self.welcome

    async def call(self, type_, **fields):
        """Send one request and return its reply.  Raises BrokerError."""
        if self.sock is None:
            await self.connect()
        msg = self._msg(type_, **fields)
        deadline = asyncio.get_running_loop().time() + self.timeout
        await self._send(msg)
        return await self._reply(msg["seq"], deadline)

    async def register(self, kernel_id, user, pid, notebook=None):
        """register -> the session id the broker gave."""
        reply = await self.call("register", kernel_id=kernel_id, user=user, pid=int(pid),
                                notebook=notebook or None)
        return reply.get("session")

    async def unregister(self, session):
        await self.call("unregister", session=session)

    def close(self):
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
