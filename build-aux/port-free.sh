#!/bin/bash
# Whether the demo's notebook server can listen on 127.0.0.1:PORT:
#   port-free.sh WHO PORT
# exit 0 when it can; else says so as WHO (with what to do) and exits 1.
# quickstart.sh runs it first of all, before anything is installed or built
# (python may not be there yet), and run-demo.sh again before the server
# starts: a port in use is said at once, not after the server gave up.
set -u
who=$1 port=${2-}
case "$port" in
'' | *[!0-9]* | 0*) ok=0 ;;
*) ok=$((port <= 65535)) ;;
esac
if [ "$ok" = 0 ]; then
    echo "$who: --port needs a port number (1 to 65535), not \"$port\"" >&2
    exit 2
fi
python=${GS_KERNEL_PYTHON:-/usr/bin/python3}
if [ -x "$python" ]; then
    # Bound as the server binds it, with SO_REUSEADDR: a port in TIME_WAIT
    # is free.
    "$python" -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$port" 2>/dev/null && exit 0
else
    # No python yet (a fresh system): a port is taken when something
    # accepts connections on it.
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || exit 0
fi
echo "$who: port $port is already in use (another notebook server?); pick another" \
    "with --port N, e.g. ./quickstart.sh --port $((port + 1))" >&2
exit 1
