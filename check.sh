#!/bin/bash
# Install what is missing (the test stack too), build out of tree, and run
# every test of gpushare:
#   1. the normal build (-Werror) and `make check` (C unit tests, the
#      simulated driver's tests, the Python/Jupyter integration tests, the
#      chaos test last);
#   2. `make distcheck` built with ASan+UBSan: the release tarball builds
#      and passes its C tests under the sanitizers;
#   3. the libFuzzer targets of tests/fuzz, about a minute (tests/fuzz/run.sh);
#   and before all, every C file formatted as .clang-format says.
# 2 and 3 are CPU-bound builds; `make check` mostly waits (the integration
# tests' brokers, timers and kernels).  So once the normal build is done,
# 2 and 3 run one after another in the background at the lowest CPU
# priority (nice 19: what the tests need of the CPU comes first) while 1's
# `make check` runs; their output follows make check's.  This halves CI on
# a 2-core machine.  GPUSHARE_CI_SERIAL=1 runs them after `make check`
# instead (every step alone, as before).
# The last line is "N passed, N failed, N skipped".  .ci/run runs this.
set -u
cd "$(dirname "$0")"
jobs=$(nproc)
extra_failed=0 extra_what=""
# Each step's heading says when it began, seconds since the start: where
# CI's time goes, from its output alone.
say() { echo "== [${SECONDS} s] $*"; }
step_failed() { extra_failed=$((extra_failed + 1)); extra_what="$extra_what $1"; echo "check: FAILED: $1"; }

build-aux/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }
build-aux/out-of-tree.sh || { echo "0 passed, 1 failed"; exit 1; }
autoreconf -fi >/dev/null 2>&1 || { autoreconf -fi; echo "0 passed, 1 failed"; exit 1; }

rm -rf _build _build-asan _build-dist
mkdir -p _build _build-dist
cuda=${CUDA_DIR:+--with-cuda=$CUDA_DIR}

# The steps besides `make check` (2 and 3 above); a failed one's name goes to
# _build/other-steps.failed (one a line), their output to stdout.
bg_failed() { echo "$1" >>_build/other-steps.failed; echo "check: FAILED: $1"; }
other_steps() {
    # The tarball builds under ASan+UBSan and its C tests pass there: one
    # build for both (distcheck's C tests and the sanitizers' are the same
    # unit, simulated-driver and hook tests; the integration suite ran on
    # the main build: distcheck configures --disable-integration-tests).
    # Two full builds less than a distcheck beside a sanitizer build of
    # its own.  In a build directory of its own, so that it and `make
    # check` never run make in the same one.
    san="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
    if [ "${GPUSHARE_SKIP_DISTCHECK:-0}" != 1 ]; then
        say "make distcheck, built with ASan+UBSan"
        if (cd _build-dist && ../configure -q --enable-assertions $cuda &&
            make -s -j"$jobs" distcheck DISTCHECK_CONFIGURE_FLAGS="--enable-werror \
                CFLAGS='$san' LDFLAGS='-fsanitize=address,undefined'" >distcheck.out 2>&1); then
            build-aux/check-dist-complete.sh _build-dist/gpushare-*.tar.gz || bg_failed "tarball complete"
        else
            tail -60 _build-dist/distcheck.out
            bg_failed "distcheck (ASan+UBSan)"
        fi
        # Its test counts, for the summary (distcheck removes its tree).
        grep -E '^# (PASS|XFAIL|FAIL|ERROR|XPASS|SKIP): ' _build-dist/distcheck.out \
            >_build-dist/test-suite.log
    fi

    say "fuzzing (libFuzzer, tests/fuzz/run.sh)"
    tests/fuzz/run.sh || bg_failed "fuzz"
    say "background steps done"
}
rm -f _build/other-steps.failed _build/other-steps.out
serial=${GPUSHARE_CI_SERIAL:-0}
bg=""
# In the background, niced from its first command on (children inherit it).
start_other_steps() {
    (renice -n 19 -p "$BASHPID" >/dev/null && other_steps) >_build/other-steps.out 2>&1 &
    bg=$!
}

say "format (clang-format)"
build-aux/check-format.sh || step_failed "format"

say "build (-Werror)"
if (cd _build && ../configure -q --enable-werror --enable-assertions $cuda && make -s -j"$jobs"); then
    if [ "$serial" != 1 ]; then
        say "in the background, niced: distcheck built with ASan+UBSan, fuzzing"
        start_other_steps
    fi
    say "make check"
    (cd _build && make -k -j"$jobs" check >check.out 2>&1) || step_failed "make check"
    say "make check done"
    grep -E '^(PASS|FAIL|SKIP|ERROR|XPASS|XFAIL): ' _build/check.out | grep -v '^PASS' | head -50
    # A failure only CI saw must be readable from CI's output alone.
    grep -lE '^(FAIL|ERROR): ' $(find _build/tests -name '*.log' ! -name test-suite.log) 2>/dev/null |
        head -5 | while read -r log; do echo "== $log (last 60 lines)"; tail -60 "$log"; done
else
    step_failed "build"
fi

if [ -n "$bg" ]; then
    wait "$bg"
    cat _build/other-steps.out
else
    other_steps 2>&1 | tee _build/other-steps.out
fi
if [ -f _build/other-steps.failed ]; then
    while read -r what; do
        extra_failed=$((extra_failed + 1)) extra_what="$extra_what $what"
    done <_build/other-steps.failed
fi

EXTRA_FAILED=$extra_failed EXTRA_FAILED_WHAT="$extra_what" build-aux/test-summary.sh _build _build-dist
