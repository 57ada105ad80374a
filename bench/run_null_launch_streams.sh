#!/bin/bash
# null_launch_streams natively and under the hook granted by a broker of its
# own, NLS_ROUNDS rounds interleaved: JSON lines to OUTFILE, then a table
# (per stream count, medians over the rounds) on stdout.
#   bench/run_null_launch_streams.sh BUILDDIR [OUTFILE]
# The programs come from the build tree BUILDDIR, or from NLS_PROGRAM,
# NLS_HOOK and NLS_BROKER (the GPU machine's .carry: tests/gpu/run_h200.sh
# launch_streams).  NLS_ARGS: batches, batch size, stream counts (default
# "1500 256 1,4,8,16").  NLS_BASELINE_HOOK: another build of the hook (an
# earlier commit's, say), run the same way in every round for comparison.
# NLS_BURSTS_OFF=1: one more run per round under the hook with
# GPUSHARE_BURSTS=0, which separates the stream cache from the burst
# monitor: the monitor sees only the hook's batches, so to it the device
# goes quiet during the real driver's batches, and the first probe of the
# burst that the next hook batch starts lands inside that batch, never
# inside a real one.
# Without an NVIDIA driver the simulated one (BUILDDIR/tests/simcuda) runs
# it, with instant kernels: a check that it works, not a measurement.
set -eu
b=${1:?usage: run_null_launch_streams.sh BUILDDIR [OUTFILE]}
out=${2:-/dev/null}
prog=${NLS_PROGRAM:-$b/bench/null_launch_streams}
hook=${NLS_HOOK:-$b/libhook/.libs/libgpushare-hook.so}
broker_bin=${NLS_BROKER:-$b/broker/gpushare-broker}
rounds=${NLS_ROUNDS:-3}
read -r -a args <<<"${NLS_ARGS:-1500 256 1,4,8,16}"
dir=$(mktemp -d /tmp/gsnls.XXXXXX)
ep="ipc://$dir/broker.sock"
if [ -e "$b/tests/simcuda/.libs/libcuda.so.1" ] &&
    ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libcuda\.so\.1 '; then
    export LD_LIBRARY_PATH="$b/tests/simcuda/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export GPUSHARE_SIM_NAME="/gsnls-$$" GPUSHARE_SIM_KERNEL_US=0
    sim=1
fi
"$broker_bin" -v -e "$ep" 2>"$dir/broker.log" &
broker=$!
cleanup() {
    kill "$broker" 2>/dev/null || true
    wait "$broker" 2>/dev/null || true
    rm -rf "$dir"
    [ -z "${sim:-}" ] || rm -f "/dev/shm/${GPUSHARE_SIM_NAME#/}"
}
trap cleanup EXIT
trap "exit 1" INT TERM
timeout 20 grep -q -m1 "listening on" <(tail -F "$dir/broker.log" 2>/dev/null)

run() { # run LABEL ROUND [ENV...]: one JSON line per stream count, labelled
    local label=$1 round=$2
    shift 2
    env "$@" "$prog" "${args[@]}" | sed "s/^{/{\"run\": \"$label\", \"round\": $round, /"
}
: >"$dir/all.jsonl"
for round in $(seq "$rounds"); do
    run native "$round" >>"$dir/all.jsonl"
    run hook+broker "$round" LD_PRELOAD="$hook" GPUSHARE_BROKER="$ep" >>"$dir/all.jsonl"
    if [ "${NLS_BURSTS_OFF:-0}" = 1 ]; then
        run hook-nobursts+broker "$round" LD_PRELOAD="$hook" GPUSHARE_BROKER="$ep" \
            GPUSHARE_BURSTS=0 >>"$dir/all.jsonl"
    fi
    if [ -n "${NLS_BASELINE_HOOK:-}" ]; then
        run baseline+broker "$round" LD_PRELOAD="$NLS_BASELINE_HOOK" GPUSHARE_BROKER="$ep" \
            >>"$dir/all.jsonl"
    fi
done
cat "$dir/all.jsonl" >"$out"

python3 - "$dir/all.jsonl" "${sim:+simulated driver: the numbers mean nothing}" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("null_launch_streams: ns per launch, medians over %d round(s) of %d batches of %d"
      % (len({r["round"] for r in rows}), rows[0]["batches"], rows[0]["batch"]))
if sys.argv[2]:
    print("(" + sys.argv[2] + ")")
for run in ("hook+broker", "hook-nobursts+broker", "baseline+broker"):
    gates = sorted({r["gate"] for r in rows if r["run"] == run})
    if gates:
        print("%s: gate at the end %s (1 = granted)" % (run, ",".join(map(str, gates))))
base = any(r["run"] == "baseline+broker" for r in rows)
nob = any(r["run"] == "hook-nobursts+broker" for r in rows)
print("%8s %10s %14s %10s %10s%s%s   %s" % ("streams", "native", "real (hooked)", "hook",
      "overhead", " no bursts" if nob else "", " baseline" if base else "",
      "overhead per round"))
for n in sorted({r["streams"] for r in rows}):
    pick = lambda run: [r for r in rows if r["streams"] == n and r["run"] == run]
    ovh = lambda rs: [r["hook_overhead_ns_median_of_paired_diffs"] for r in rs]
    hk = pick("hook+broker")
    line = "%8d %10.1f %14.1f %10.1f %10.1f" % (
        n, med([r["real_driver_ns"] for r in pick("native")]),
        med([r["real_driver_ns"] for r in hk]), med([r["hook_ns"] for r in hk]), med(ovh(hk)))
    if nob:
        line += " %10.1f" % med(ovh(pick("hook-nobursts+broker")))
    if base:
        line += " %9.1f" % med(ovh(pick("baseline+broker")))
    print(line + "   " + " ".join("%.1f" % x for x in ovh(hk)))
EOF
