"""The parties of the multi-user CUDA IPC tests (test_users_ipc.py).

    ipcpeer.py cuda              a notebook's process (the hook preloaded, on
                                 the simulated GPU): prints "ready <pid>",
                                 then reads one command a line, answers one:
        export BYTES SEED        allocate, fill with gpuworker.pattern(SEED),
                                 cuIpcGetMemHandle -> "handle <hex>" | "err <CUDA error>"
        again                    cuIpcGetMemHandle of the last one again -> "handle <hex>"
        open HEX BYTES SEED      cuIpcOpenMemHandle, compare with the pattern,
                                 close -> "ok" | "bad <offset> <first 16 bytes>" | "err <CUDA error>"

What a hostile user does, without CUDA (each prints one line when in place,
then waits for its stdin to close):
    ipcpeer.py impostor HEX BYTES  binds the server name of the handle HEX
                                 (a leaked one: she knows its keys) and
                                 answers one connection as its exporter would,
                                 with her own memory ("MALLORY-INJECTED") and
                                 the handle's proof; prints "listening", then
                                 "received <bytes>" (what the importer sent)
    ipcpeer.py squat PID COUNT   binds "gpushare-ipc-<p>" for COUNT pids from
                                 PID on, and "gpushare-ipc-PID-<16 hex>" for
                                 the random parts 0..9 -> "squatted <n>"
    ipcpeer.py idle PID COUNT    finds the server of PID in /proc/net/unix
                                 (everyone may read it), connects COUNT times
                                 and says nothing -> "holding <n> <name>"
"""
import array
import os
import socket
import struct
import sys

# The handle's layout (libhook/hook_ipc_handle.c) and the server's answer
# (libhook/hook_ipc.c): what an impostor who read the source would send.
HANDLE_PID, HANDLE_NAME, HANDLE_PROOF = 8, 24, 52
ANSWER = struct.Struct("=iiQQQi12s100s4x")


def name_of(handle):
    pid = struct.unpack_from("=i", handle, HANDLE_PID)[0]
    part = struct.unpack_from("=Q", handle, HANDLE_NAME)[0]
    return "gpushare-ipc-%d-%016x" % (pid, part)


def cuda():
    import gpusim
    import gpuworker
    gpusim.init()
    print("ready %d" % os.getpid(), flush=True)
    keep = []
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "export":
                n, seed = int(words[1]), int(words[2])
                p = gpusim.alloc(n)
                gpusim.write(p, gpuworker.pattern(seed, n))
                keep.append(p)
                print("handle %s" % gpusim.ipc_get_handle(p).hex(), flush=True)
            elif words[0] == "again":
                print("handle %s" % gpusim.ipc_get_handle(keep[-1]).hex(), flush=True)
            elif words[0] == "open":
                n, seed = int(words[2]), int(words[3])
                p = gpusim.ipc_open_handle(bytes.fromhex(words[1]))
                got, want = gpusim.read(p, n), gpuworker.pattern(seed, n)
                gpusim.ipc_close_handle(p)
                if got != want:
                    first = next(i for i in range(n) if got[i] != want[i])
                    print("bad %d %r" % (first, got[:16]), flush=True)
                else:
                    print("ok", flush=True)
            else:
                print("err unknown command", flush=True)
        except gpusim.CudaError as e:
            print("err %s" % e.name, flush=True)


def impostor(handle_hex, nbytes):
    handle = bytes.fromhex(handle_hex)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind("\0" + name_of(handle))
    s.listen(8)
    print("listening", flush=True)
    c, _ = s.accept()
    c.settimeout(5)
    try:
        got = c.recv(256)
    except socket.timeout:
        got = b""
    fd = os.memfd_create("mallory")
    os.write(fd, (b"MALLORY-INJECTED" * (nbytes // 16 + 1))[:nbytes])
    proof = handle[HANDLE_PROOF:HANDLE_PROOF + 12]
    answer = ANSWER.pack(1, 1, nbytes, nbytes, nbytes, 0, proof, b"")
    try:
        c.sendmsg([answer], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    except OSError:
        pass  # the importer hung up
    print("received %d" % len(got), flush=True)
    sys.stdin.read()


def squat(pid, count):
    held = []
    names = ["gpushare-ipc-%d" % p for p in range(pid, pid + count)]
    names += ["gpushare-ipc-%d-%016x" % (pid, k) for k in range(10)]
    for name in names:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.bind("\0" + name)
        s.listen(1)
        held.append(s)
    print("squatted %d" % len(held), flush=True)
    sys.stdin.read()


def idle(pid, count):
    prefix = "@gpushare-ipc-%d-" % pid
    with open("/proc/net/unix") as f:
        found = [w for line in f for w in line.split()[7:8] if w.startswith(prefix)]
    held = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect("\0" + found[0][1:])
        held.append(s)
    print("holding %d %s" % (len(held), found[0]), flush=True)
    sys.stdin.read()


def main(argv):
    if argv[0] == "cuda":
        cuda()
    elif argv[0] == "impostor":
        impostor(argv[1], int(argv[2]))
    elif argv[0] == "squat":
        squat(int(argv[1]), int(argv[2]))
    elif argv[0] == "idle":
        idle(int(argv[1]), int(argv[2]))
    else:
        sys.exit("ipcpeer.py: no mode %r" % argv[0])
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main(sys.argv[1:]))
