#!/bin/bash
# Run an installed gpushare: the broker and a Jupyter Notebook server whose
# kernels may pick "Shared GPU".
#   run-demo.sh --prefix DIR [--simdir DIR] [--notebooks DIR] [--port N] [--smoke]
# --prefix     where gpushare is installed (bin/, lib/, share/jupyter/)
# --simdir     the build tree's tests/simcuda, used when there is no NVIDIA driver
# --notebooks  directory the notebook server opens (a copy is not made)
# --smoke      start everything, check it answers, stop, exit 0/1 (for tests)
set -u
prefix="" simdir="" notebooks="$PWD" port=8888 smoke=0
while [ $# -gt 0 ]; do
    case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --simdir) simdir=$2; shift 2 ;;
    --notebooks) notebooks=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    *) echo "run-demo: unknown argument \"$1\"" >&2; exit 2 ;;
    esac
done
[ -n "$prefix" ] && [ -x "$prefix/bin/gpushare-broker" ] ||
    { echo "run-demo: --prefix must name an installed gpushare (no $prefix/bin/gpushare-broker)" >&2; exit 2; }
python=${GS_KERNEL_PYTHON:-/usr/bin/python3}
# The notebook server's port, checked before anything starts: a port in use
# is said at once, with what to do, not after the server gave up.  (Bound
# as the server binds it, with SO_REUSEADDR: a port in TIME_WAIT is free.)
if ! "$python" -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$port" 2>/dev/null; then
    echo "run-demo: port $port is already in use (another notebook server?); pick another" \
        "with --port N, e.g. ./quickstart.sh --port $((port + 1))" >&2
    exit 1
fi
state="$prefix/var/run"
# A unix socket path holds 107 bytes; a deep prefix gets a short private dir.
[ ${#state} -le 80 ] || state=$(mktemp -d /tmp/gpushare-demo.XXXXXX)
mkdir -p "$state"
export GPUSHARE_BROKER="ipc://$state/broker.sock"
export JUPYTER_PATH="$prefix/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
export PYDEVD_DISABLE_FILE_VALIDATION=1
# `make install` put the kernel's extension (gpushare_ipython: the wait
# line) in the prefix's site-packages, on python's path only for /usr and
# /usr/local: a prefix of one's own is added here.
ext=$(find "$prefix/lib" -maxdepth 5 -type d -name gpushare_ipython -print -quit 2>/dev/null)
[ -n "$ext" ] && export PYTHONPATH="$(dirname "$ext")${PYTHONPATH:+:$PYTHONPATH}"

if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ -z "${GPUSHARE_FORCE_SIM:-}" ]; then
    echo "run-demo: using the NVIDIA driver"
else
    [ -n "$simdir" ] && [ -e "$simdir/.libs/libcuda.so.1" ] ||
        { echo "run-demo: no NVIDIA driver and no simulated driver (--simdir)" >&2; exit 1; }
    export LD_LIBRARY_PATH="$simdir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # gpusim, the simulated GPU's Python client (the example notebook uses
    # it): the build lays it out in tests/simcuda/pythonpath.
    export PYTHONPATH="$simdir/pythonpath${PYTHONPATH:+:$PYTHONPATH}"
    # A small GPU: the example tour's two notebooks fill about half of it
    # each, and parking copies that into host memory, all of it this
    # machine's RAM; the broker's host pool pins chunks to match.
    export GPUSHARE_SIM_MEMORY=${GPUSHARE_SIM_MEMORY:-1G}
    export GPUSHARE_POOL_CHUNK=${GPUSHARE_POOL_CHUNK:-64M}
    export GPUSHARE_SIM_NAME=${GPUSHARE_SIM_NAME:-/gpushare-demo-$(id -u)}
    echo "================================================================"
    echo " No NVIDIA driver found: gpushare runs on the SIMULATED GPU"
    echo " (the test suite's simulated libcuda, $GPUSHARE_SIM_MEMORY)."
    echo " Nothing here runs on real hardware."
    echo "================================================================"
fi

logs="$prefix/var/log"
mkdir -p "$logs"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Start a program with its stderr in a log, and wait until the log shows
# the line that means it is ready, or the program has exited (then its log
# says why, at once).
start_and_wait() {
    local log=$1 pattern=$2; shift 2
    : >"$log"
    "$@" 2>"$log" >>"$log.out" &
    local pid=$!
    pids+=("$pid")
    local tries=600 # 60 s
    until grep -q -E "$pattern" "$log"; do
        if ! kill -0 "$pid" 2>/dev/null || [ "$tries" -eq 0 ]; then
            echo "run-demo: $1 did not start; its log:" >&2
            cat "$log" >&2
            exit 1
        fi
        tries=$((tries - 1))
        sleep 0.1
    done
}

start_and_wait "$logs/broker.log" "listening on" "$prefix/bin/gpushare-broker" -v
echo "run-demo: broker listening on $GPUSHARE_BROKER (log: $logs/broker.log)"
"$prefix/bin/gpushare" status

token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
root=()
[ "$(id -u)" -ne 0 ] || root=(--allow-root)
start_and_wait "$logs/notebook.log" "http://127\.0\.0\.1:$port/" \
    "$python" -m notebook --no-browser --ip=127.0.0.1 --port="$port" --port-retries=0 \
    --notebook-dir="$notebooks" --NotebookApp.token="$token" "${root[@]}"
url="http://127.0.0.1:$port/?token=$token"

if [ "$smoke" = 1 ]; then
    specs=$("$python" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$port/api/kernelspecs?token=$token")
    if ! echo "$specs" | grep -q '"display_name": "Shared GPU"'; then
        echo "run-demo: the notebook server does not offer the Shared GPU kernel: $specs" >&2
        exit 1
    fi
    echo "run-demo: smoke test passed: the notebook server offers \"Shared GPU\""
    exit 0
fi
echo
echo "Open $url"
echo "and pick the \"Shared GPU\" kernel. Ctrl-C stops the notebook server and the broker."
wait
