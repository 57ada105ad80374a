#!/bin/bash
# The broker's load test (doc/load-test.md): starts a gpushare-broker on a
# private endpoint (on the simulated GPU when there is no NVIDIA driver),
# runs bench/load/load_storm against it and prints load_storm's JSON.
#
#   bench/load/run_load.sh BUILDDIR [load_storm options...]
#   e.g. bench/load/run_load.sh _build --clients 1000 --sessions 200 --warmup 60 \
#            --warmup-grants 600 --measure 300
#
# Environment: LOAD_BROKER_ARGS (more broker arguments, e.g.
# "--policy exclusive --set tq=0.05"), LOAD_KEEP=1 (keep the temporary
# directory with the broker's log).  Exits 1 when the broker died during
# the storm or load_storm could not run.
set -eu
b=$(cd "${1:?usage: run_load.sh BUILDDIR [load_storm options...]}" && pwd)
shift
dir=$(mktemp -d /tmp/gsload.XXXXXX)
ep="ipc://$dir/broker.sock"
broker=
cleanup() {
    [ -z "$broker" ] || kill "$broker" 2>/dev/null || true
    [ -z "${GPUSHARE_SIM_NAME:-}" ] || rm -f "/dev/shm/${GPUSHARE_SIM_NAME#/}"
    [ "${LOAD_KEEP:-0}" = 1 ] && echo "run_load: kept $dir" >&2 || rm -rf "$dir"
}
trap cleanup EXIT
if ! ldconfig -p | grep -q 'libcuda\.so\.1 '; then
    export LD_LIBRARY_PATH="$b/tests/simcuda/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export GPUSHARE_SIM_NAME="/gsload-$$" GPUSHARE_SIM_MEMORY=${GPUSHARE_SIM_MEMORY:-16G}
fi
# 1000 clients of one user: the per-uid cap (256 by default) must let
# them in; each is a descriptor in the broker and two in load_storm.
cat >"$dir/broker.conf" <<EOF
max_connections_per_uid = 100000
EOF
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# shellcheck disable=SC2086 # LOAD_BROKER_ARGS is a list of arguments
"$b/broker/gpushare-broker" -v -e "$ep" --config "$dir/broker.conf" ${LOAD_BROKER_ARGS:-} \
    2>"$dir/broker.log" &
broker=$!
for _ in $(seq 200); do
    grep -q "listening on" "$dir/broker.log" 2>/dev/null && break
    kill -0 "$broker" 2>/dev/null || break
    sleep 0.1
done
grep -q "listening on" "$dir/broker.log" || { cat "$dir/broker.log" >&2; exit 1; }
rc=0
"$b/bench/load/load_storm" --endpoint "$ep" --broker-pid "$broker" "$@" || rc=$?
if ! kill -0 "$broker" 2>/dev/null; then
    echo "run_load: the broker died during the storm:" >&2
    tail -20 "$dir/broker.log" >&2
    exit 1
fi
exit "$rc"
