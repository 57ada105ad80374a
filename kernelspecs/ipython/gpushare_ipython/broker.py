"""The broker, for %gpushare: gpushare_provisioner's client (the same
endpoint rule, socket checks and protocol as the notebook server's side),
run on a thread of its own with its own event loop, since the kernel runs
the cell inside its own (asyncio.run cannot be nested)."""
import asyncio
import threading

TIMEOUT_S = 2.0


class Unavailable(Exception):
    """No broker answered (or it refused): .code is the broker's error code
    or "unavailable" / "timeout" / "missing"."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def call(type_, timeout=TIMEOUT_S, **fields):
    """One request (hello first, as role cli); the reply.  Raises
    Unavailable."""
    try:
        from gpushare_provisioner.broker_client import BrokerClient, BrokerError, broker_endpoint
    except ImportError as e:
        raise Unavailable("missing", "the broker client (gpushare_provisioner) is not installed: "
                                     "%s" % e)
    from . import __version__

    out = {}

    async def request():
        client = BrokerClient(broker_endpoint(), role="cli", timeout=timeout,
                              client_version=__version__)
        try:
            return await client.call(type_, **fields)
        finally:
            client.close()

    def run():
        try:
            out["reply"] = asyncio.run(request())
        except BrokerError as e:
            out["error"] = Unavailable(e.code, e.message)
        except Exception as e:  # a bad endpoint, zmq
            out["error"] = Unavailable("unavailable", str(e))

    t = threading.Thread(target=run, name="gpushare-broker-call", daemon=True)
    t.start()
    t.join(timeout * 3 + 5)
    if t.is_alive():
        raise Unavailable("timeout", "no answer from the broker")
    if "error" in out:
        raise out["error"]
    return out["reply"]


def endpoint():
    try:
        from gpushare_provisioner.broker_client import broker_endpoint
        return broker_endpoint()
    except Exception:
        return "?"
