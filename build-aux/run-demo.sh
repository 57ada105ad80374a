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
prefix=$(cd "$prefix" && pwd) # absolute: it is printed for another shell
python=${GS_KERNEL_PYTHON:-/usr/bin/python3}
# The notebook server's port, checked before anything starts (quickstart.sh
# checked it before the build too).
"$(dirname "$0")/port-free.sh" run-demo "$port" || exit $?
state="$prefix/var/run"
# A unix socket path holds 107 bytes; a deep prefix gets a short private dir.
[ ${#state} -le 80 ] || state=$(mktemp -d /tmp/gpushare-demo.XXXXXX)
mkdir -p "$state"
export JUPYTER_PATH="$prefix/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
export PYDEVD_DISABLE_FILE_VALIDATION=1
# `make install` put the kernel's extension (gpushare_ipython: the wait
# line) in the prefix's site-packages, on python's path only for /usr and
# /usr/local: a prefix of one's own is added here.
ext=$(find "$prefix/lib" -maxdepth 5 -type d -name gpushare_ipython -print -quit 2>/dev/null)
[ -n "$ext" ] && export PYTHONPATH="$(dirname "$ext")${PYTHONPATH:+:$PYTHONPATH}"

if PATH=$PATH:/sbin:/usr/sbin ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ -z "${GPUSHARE_FORCE_SIM:-}" ]; then
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
# the line that means it is ready (0), or the program has exited (1: its
# log says why).
start_and_wait() {
    local log=$1 pattern=$2
    shift 2
    : >"$log"
    "$@" 2>"$log" >>"$log.out" &
    local pid=$!
    pids+=("$pid")
    local tries=600 # 60 s
    until grep -q -E "$pattern" "$log"; do
        if ! kill -0 "$pid" 2>/dev/null || [ "$tries" -eq 0 ]; then
            kill "$pid" 2>/dev/null
            return 1
        fi
        tries=$((tries - 1))
        sleep 0.1
    done
}
# The same, and a program that did not start ends the demo, its log shown.
must_start() {
    start_and_wait "$@" && return
    echo "run-demo: $3 did not start; its log:" >&2
    cat "$1" >&2
    exit 1
}

# The broker listens where gpushare's programs of this user look by
# default, the per-user socket ($XDG_RUNTIME_DIR/gpushare/, else
# /tmp/gpushare-UID/; doc/security.md), so that another shell of the user's
# reaches it with no setting; a GPUSHARE_BROKER of the user's own is kept.
# Where the default cannot be had (another broker of the user's listens
# there, its directory is not the user's own 0700 one, the path is too
# long), a socket of the demo's own, named in the lines for another shell.
ready="gpushare-broker [^ ]+ listening on "
broker=("$prefix/bin/gpushare-broker" -v)
if [ -z "${GPUSHARE_BROKER:-}" ] && ! start_and_wait "$logs/broker.log" "$ready" "${broker[@]}"; then
    echo "run-demo: the broker cannot listen where gpushare looks by default:" \
        "$(grep -v '^$' "$logs/broker.log" | tail -n 1)" >&2
    echo "run-demo: so it listens on a socket of the demo's own (GPUSHARE_BROKER, below)" >&2
    export GPUSHARE_BROKER="ipc://$state/broker.sock"
fi
[ -z "${GPUSHARE_BROKER:-}" ] || must_start "$logs/broker.log" "$ready" "${broker[@]}"
endpoint=$(grep -o -E "${ready}[^ ]+" "$logs/broker.log" | head -n 1 | awk '{print $NF}')
echo "run-demo: broker listening on $endpoint (log: $logs/broker.log)"
# As another shell would ask, with no endpoint named.
"$prefix/bin/gpushare" status

token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
root=()
[ "$(id -u)" -ne 0 ] || root=(--allow-root)
must_start "$logs/notebook.log" "http://127\.0\.0\.1:$port/" \
    "$python" -m notebook --no-browser --ip=127.0.0.1 --port="$port" --port-retries=0 \
    --notebook-dir="$notebooks" --NotebookApp.token="$token" "${root[@]}"
url="http://127.0.0.1:$port/?token=$token"

# What another shell of the user's pastes to have the tools and their
# manual pages (the per-user socket needs no more; another one is named).
another_shell() {
    echo "In another shell (as $(id -un)), paste these to have gpushare status, top, run and" \
        "'man gpushare' there:"
    echo "  export PATH=$(printf %q "$prefix/bin"):\$PATH"
    echo "  export MANPATH=$(printf %q "$prefix/share/man"):\$MANPATH"
    [ -z "${GPUSHARE_BROKER:-}" ] || echo "  export GPUSHARE_BROKER=$(printf %q "$GPUSHARE_BROKER")"
}

if [ "$smoke" = 1 ]; then
    specs=$("$python" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$port/api/kernelspecs?token=$token")
    if ! echo "$specs" | grep -q '"display_name": "Shared GPU"'; then
        echo "run-demo: the notebook server does not offer the Shared GPU kernel: $specs" >&2
        exit 1
    fi
    echo "run-demo: smoke test passed: the notebook server offers \"Shared GPU\""
    another_shell
    exit 0
fi
echo
echo "Open $url"
echo "and pick the \"Shared GPU\" kernel. Ctrl-C stops the notebook server and the broker."
echo
another_shell
wait
