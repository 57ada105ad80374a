#!/bin/bash
# The broker's benchmarks (issue 4): grant round trip, handoff, message
# throughput on one core, the cost of 256 idle sessions; plus the ZeroMQ
# round trip between two processes, the floor under the first two.
#   bench/run_broker_bench.sh BUILDDIR [OUTFILE]
# Needs a GPU for the broker: the real one, or the simulated driver
# (tests/simcuda) when there is no NVIDIA driver.  Prints JSON lines.
set -eu
b=${1:?usage: run_broker_bench.sh BUILDDIR [OUTFILE]}
out=${2:-/dev/stdout}
dir=$(mktemp -d /tmp/gsbench.XXXXXX)
ep="ipc://$dir/broker.sock"
if ! ldconfig -p | grep -q 'libcuda\.so\.1 '; then
    export LD_LIBRARY_PATH="$b/tests/simcuda/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export GPUSHARE_SIM_NAME="/gsbench-$$" GPUSHARE_SIM_MEMORY=16G
fi
start_broker() { # start_broker ARGS... ; sets $broker
    "$b/broker/gpushare-broker" -v -e "$ep" "$@" 2>"$dir/broker.log" &
    broker=$!
    timeout 20 grep -q -m1 "listening on" <(tail -F "$dir/broker.log" 2>/dev/null)
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
{
    echo "{\"mode\": \"machine\", \"nproc\": $(nproc), \"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\"}"
    "$b/bench/zmq_rtt" 2000 0
    start_broker --policy exclusive
    # Round trips as deployed, unpinned like the zmq_rtt floor above (the
    # first H200 run measured them pinned, 19 us above the floor).
    "$b/bench/broker_bench" "$ep" rtt 20000
    "$b/bench/broker_bench" "$ep" handoff 5000
    # One core: pin the broker so throughput is per core; the round trip
    # again, pinned, for comparison with the first run.
    taskset -pc 0 "$broker" >/dev/null 2>&1 || true
    "$b/bench/broker_bench" "$ep" rtt 5000 | sed 's/"grant_round_trip"/"grant_round_trip_pinned"/'
    "$b/bench/broker_bench" "$ep" throughput 5
    # 256 idle sessions for 20 s: the broker's CPU time over that window.
    "$b/bench/broker_bench" "$ep" idle 256 25 >"$dir/idle.out" &
    idle=$!
    timeout 60 grep -q -m1 ready <(tail -F "$dir/idle.out" 2>/dev/null)
    t0=$(cpu_ticks "$broker") s0=$(date +%s.%N)
    sleep 20 # the measurement window itself, not a synchronisation
    t1=$(cpu_ticks "$broker") s1=$(date +%s.%N)
    wait $idle
    hz=$(getconf CLK_TCK)
    awk -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v hz="$hz" 'BEGIN {
        printf "{\"mode\": \"idle_sessions\", \"sessions\": 256, \"seconds\": %.1f, \"broker_cpu_percent\": %.3f}\n",
            s1 - s0, 100 * (t1 - t0) / hz / (s1 - s0) }'
    kill "$broker"
    wait "$broker" 2>/dev/null || true
} >"$out"
rm -rf "$dir"
[ -z "${GPUSHARE_SIM_NAME:-}" ] || rm -f "/dev/shm/${GPUSHARE_SIM_NAME#/}"
