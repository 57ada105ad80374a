#!/bin/sh
# Build every libFuzzer target of tests/fuzz with clang (-fsanitize=fuzzer,
# address,undefined), straight from the sources: automake's gcc build is not
# involved.  Then run each for a bounded time from a copy of its seed corpus,
# tests/fuzz/corpus/<name>/ for fuzz_<name>.c, and fail when one crashes,
# leaks, hits undefined behaviour or breaks a property its harness checks.
#
#   tests/fuzz/run.sh [SECONDS]       SECONDS per target (or GPUSHARE_FUZZ_SECONDS);
#                                     default: about a minute in all
#   tests/fuzz/run.sh -t fuzz_config  only the targets named (repeatable)
#
# Environment: GPUSHARE_FUZZ_DIR  where binaries, corpora and crash
# artifacts go (default: a new directory under ${TMPDIR:-/tmp}, kept when
# something failed); GPUSHARE_FUZZ_JOBS  targets run at once (default: the
# number of CPUs, at most 2); CC  the compiler (default clang).
# GPUSHARE_FUZZ_TMP (set here) is where the targets write files.
# The source tree is never written: the seed corpus is copied before
# libFuzzer adds to it.  A crash prints its reproducer, which runs as
#   <dir>/bin/<target> <dir>/artifacts/<target>/crash-...
set -u

src=$(cd "$(dirname "$0")/../.." && pwd)
fuzz="$src/tests/fuzz"
CC=${CC:-clang}
seconds=${GPUSHARE_FUZZ_SECONDS:-}
only=""
while [ $# -gt 0 ]; do
    case "$1" in
    -t) only="$only $2"; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) seconds=$1; shift ;;
    esac
done

# Each target: the product sources it needs beside its harness.
# The scheduler is every file of broker/sched (libgssched: no I/O), so that a
# new one does not break this build.
SCHED=$(cd "$src" && echo broker/sched/*.c)
sources() {
    case "$1" in
    fuzz_protocol) echo common/protocol.c ;;
    fuzz_config) echo common/broker_config.c common/endpoint.c common/socket_trust.c common/log.c ;;
    fuzz_settings) echo common/broker_config.c common/size.c $SCHED ;;
    fuzz_connection_file | fuzz_launch_argv) echo launcher/connection_file.c ;;
    fuzz_iopub) echo launcher/iopub.c launcher/hmac.c ;;
    fuzz_nb_server) echo launcher/nb_server.c ;;
    *) echo "run.sh: no sources listed for $1" >&2; return 1 ;;
    esac
}
targets=""
for f in "$fuzz"/fuzz_*.c; do
    t=$(basename "$f" .c)
    if [ -z "$only" ] || echo " $only " | grep -q " $t "; then targets="$targets $t"; fi
done
[ -n "$targets" ] || { echo "run.sh: no target matches:$only" >&2; exit 2; }
ntargets=$(echo $targets | wc -w)

command -v "$CC" >/dev/null || { echo "run.sh: $CC is missing (apt-get install clang)" >&2; exit 2; }
pc=$(pkg-config --cflags --libs jansson libsodium 2>/dev/null) ||
    { echo "run.sh: pkg-config finds no jansson or libsodium" >&2; exit 2; }

jobs=${GPUSHARE_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -gt 2 ] && [ -z "${GPUSHARE_FUZZ_JOBS:-}" ] && jobs=2
[ "$jobs" -ge 1 ] || jobs=1
# About a minute in all by default: the targets run $jobs at a time.
if [ -z "$seconds" ]; then
    rounds=$(((ntargets + jobs - 1) / jobs))
    seconds=$((45 / rounds))
    [ "$seconds" -ge 5 ] || seconds=5
fi

dir=${GPUSHARE_FUZZ_DIR:-}
[ -n "$dir" ] || dir=$(mktemp -d "${TMPDIR:-/tmp}/gpushare-fuzz.XXXXXX") || exit 2
mkdir -p "$dir/bin" "$dir/corpus" "$dir/artifacts" "$dir/log"
# Where the targets write files (fuzz_file.h): in memory if possible, and
# removed at the end even when a target crashed before its own cleanup.
scratch=$(mktemp -d /dev/shm/gpushare-fuzz.XXXXXX 2>/dev/null) || scratch=$(mktemp -d "$dir/tmp.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT
export GPUSHARE_FUZZ_TMP="$scratch"

# The harnesses are checked like the product (-Werror); -O1 -g for usable
# stacks; every sanitizer report is fatal.
CFLAGS="-std=c11 -D_DEFAULT_SOURCE -DGS_ASSERTIONS -O1 -g -fno-omit-frame-pointer
-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter -Werror"

build_one() {
    t=$1
    srcs=$(sources "$t") || return 1
    # shellcheck disable=SC2086
    (cd "$src" && $CC $CFLAGS -Itests/fuzz -Icommon -Ilauncher -Ibroker/sched \
        "tests/fuzz/$t.c" $srcs $pc -lm -o "$dir/bin/$t") >"$dir/log/$t.build" 2>&1
}

# Run "$@" (targets) through function $1, $jobs at a time; $failed gets
# the targets whose run failed, with ($2) after their name when $2 is set.
each() {
    fn=$1 tag=$2
    shift 2
    while [ $# -gt 0 ]; do
        batch=""
        while [ $# -gt 0 ] && [ "$(echo $batch | wc -w)" -lt "$jobs" ]; do
            $fn "$1" &
            batch="$batch $1:$!"
            shift
        done
        for tp in $batch; do
            wait "${tp#*:}"
            rc=$?
            if [ -n "$tag" ]; then
                [ $rc = 0 ] || { cat "$dir/log/${tp%%:*}.build"; failed="$failed ${tp%%:*}$tag"; }
            else
                report "${tp%%:*}" $rc
            fi
        done
    done
}

run_one() {
    t=$1
    rm -rf "$dir/corpus/$t"
    mkdir -p "$dir/corpus/$t" "$dir/artifacts/$t"
    seeds="$fuzz/corpus/${t#fuzz_}"
    [ -d "$seeds" ] && cp "$seeds"/* "$dir/corpus/$t/" 2>/dev/null
    dict=""
    [ -f "$fuzz/$t.dict" ] && dict="-dict=$fuzz/$t.dict"
    # -rss_limit_mb: ASan's shadow counts; -timeout: one input may take 10 s.
    # shellcheck disable=SC2086
    "$dir/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$dir/artifacts/$t/" $dict "$dir/corpus/$t" >"$dir/log/$t.log" 2>&1
}

# What one target's run found, when it ends.
report() {
    t=$1 rc=$2
    if [ "$rc" = 0 ]; then
        runs=$(sed -n "s/^stat::number_of_executed_units: //p" "$dir/log/$t.log")
        cov=$(grep -ao 'cov: [0-9]* ft: [0-9]*' "$dir/log/$t.log" | tail -1)
        echo "run.sh: $t: ok, $runs runs, $cov, corpus $(ls "$dir/corpus/$t" | wc -l) inputs"
        return
    fi
    failed="$failed $t"
    echo "run.sh: $t: FAILED (exit $rc); its log: $dir/log/$t.log"
    grep -aE '^(==[0-9]+==ERROR|SUMMARY|fuzz_[a-z_]*:)|runtime error' "$dir/log/$t.log" | head -5
    for a in "$dir/artifacts/$t"/*; do
        [ -e "$a" ] && echo "run.sh: reproduce with: $dir/bin/$t $a"
    done
}

echo "run.sh: building$targets in $dir/bin"
failed=""
# shellcheck disable=SC2086
each build_one "(build)" $targets
built=""
for t in $targets; do
    case "$failed" in *" $t("*) ;; *) built="$built $t" ;; esac
done
echo "run.sh: fuzzing each target for $seconds s, $jobs at a time"
# shellcheck disable=SC2086
each run_one "" $built

if [ -n "$failed" ]; then
    echo "run.sh: FAILED:$failed (binaries, logs and artifacts kept in $dir)"
    exit 1
fi
echo "run.sh: all $ntargets targets ran clean"
[ -n "${GPUSHARE_FUZZ_DIR:-}" ] || rm -rf "$dir"
exit 0
