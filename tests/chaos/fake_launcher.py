"""A stand-in for gpushare-launch's watcher as a process of its own, so that
a test can kill it (SIGKILL) like a real one: it registers a kernel with the
broker and reports its cells, one command a line on stdin:

    register KERNEL_ID KERNEL_PID   -> "registered SESSION" | "error CODE"
    busy SESSION MSG_ID             -> "ok" (a cell starts; no reply awaited)
    idle SESSION MSG_ID             -> "ok" (it ends)

The broker's endpoint comes from GPUSHARE_BROKER.  Its registration is the
broker's proof that a launcher lives (liveness by the socket's pid)."""
import json
import os
import sys

import zmq


def main():
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 30000)
    sock.connect(os.environ["GPUSHARE_BROKER"])
    seq = 0

    def send(msg):
        nonlocal seq
        seq += 1
        sock.send(json.dumps(dict(msg, v=1, seq=seq)).encode())
        return seq

    def call(msg):
        want = send(msg)
        while True:
            reply = json.loads(sock.recv())
            if reply.get("seq") == want:
                return reply

    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "register":
            hello = call({"type": "hello", "role": "launcher", "pid": os.getpid()})
            if hello.get("type") != "welcome":
                print("error %s" % hello.get("code"), flush=True)
                continue
            r = call({"type": "register", "kernel_id": words[1], "user": "tester",
                      "notebook": words[1] + ".ipynb", "pid": int(words[2])})
            print("registered %s" % r["session"] if r["type"] == "registered"
                  else "error %s" % r.get("code"), flush=True)
        elif words[0] in ("busy", "idle"):
            send({"type": "cell", "session": words[1], "state": words[0], "msg_id": words[2]})
            print("ok", flush=True)


if __name__ == "__main__":
    main()
