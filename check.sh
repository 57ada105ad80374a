#!/bin/bash
# Install what is missing (the test stack too), build out of tree, and run
# every test of gpushare:
#   1. the normal build (-Werror) and `make check` (C unit tests, the
#      simulated driver's tests, the Python/Jupyter integration tests, the
#      chaos test last);
#   2. an ASan+UBSan build running the C tests;
#   3. the libFuzzer targets of tests/fuzz, about a minute (tests/fuzz/run.sh);
#   4. `make distcheck` (the release tarball builds and passes its tests);
#   and before all, every C file formatted as .clang-format says.
# 2 to 4 are CPU-bound builds; `make check` mostly waits (the integration
# tests' brokers, timers and kernels).  So once the normal build is done,
# 2, 4 and 3 run one after another in the background at the lowest CPU
# priority (nice 19: what the tests need of the CPU comes first) while 1's
# `make check` runs; their output follows make check's.  This halves CI on
# a 2-core machine.  GPUSHARE_CI_SERIAL=1 runs them after `make check`
# instead (every step alone, as before).
# The last line is "N passed, N failed, N skipped".  .ci/run runs this.
set -u
cd "$(dirname "$0")"
jobs=$(nproc)
extra_failed=0 extra_what=""
step_failed() { extra_failed=$((extra_failed + 1)); extra_what="$extra_what $1"; echo "check: FAILED: $1"; }

build-aux/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }
build-aux/out-of-tree.sh || { echo "0 passed, 1 failed"; exit 1; }
autoreconf -fi >/dev/null 2>&1 || { autoreconf -fi; echo "0 passed, 1 failed"; exit 1; }

rm -rf _build _build-asan _build-dist
mkdir -p _build _build-asan _build-dist
cuda=${CUDA_DIR:+--with-cuda=$CUDA_DIR}

# The steps besides `make check` (2 to 4 above); a failed one's name goes to
# _build/other-steps.failed (one a line), their output to stdout.
bg_failed() { echo "$1" >>_build/other-steps.failed; echo "check: FAILED: $1"; }
other_steps() {
    echo "== ASan+UBSan build, C tests"
    san="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
    if (cd _build-asan && ../configure -q --enable-werror --enable-assertions $cuda CFLAGS="$san" \
        LDFLAGS="-fsanitize=address,undefined" && make -s -j"$jobs"); then
        (cd _build-asan && make -k -j"$jobs" -C tests/unit check >check.out 2>&1) ||
            bg_failed "sanitizer unit tests"
        (cd _build-asan && make -k -j"$jobs" -C tests/simcuda check >>check.out 2>&1) ||
            bg_failed "sanitizer simulated-driver tests"
        (cd _build-asan && make -k -j"$jobs" -C tests/hook check >>check.out 2>&1) ||
            bg_failed "sanitizer hook tests"
    else
        bg_failed "sanitizer build"
    fi

    if [ "${GPUSHARE_SKIP_DISTCHECK:-0}" != 1 ]; then
        echo "== make distcheck"
        # The tarball builds, installs and passes its C tests (the integration
        # suite runs on the main build: distcheck configures
        # --disable-integration-tests), and holds every tracked file that suite
        # or anything else needs.  In a build directory of its own, so that it
        # and `make check` never run make in the same one.
        if (cd _build-dist && ../configure -q --enable-assertions $cuda &&
            make -s -j"$jobs" distcheck >distcheck.out 2>&1); then
            build-aux/check-dist-complete.sh _build-dist/gpushare-*.tar.gz || bg_failed "tarball complete"
        else
            tail -40 _build-dist/distcheck.out
            bg_failed "distcheck"
        fi
    fi

    echo "== fuzzing (libFuzzer, tests/fuzz/run.sh)"
    tests/fuzz/run.sh || bg_failed "fuzz"
}
rm -f _build/other-steps.failed _build/other-steps.out
serial=${GPUSHARE_CI_SERIAL:-0}
bg=""
# In the background, niced from its first command on (children inherit it).
start_other_steps() {
    (renice -n 19 -p "$BASHPID" >/dev/null && other_steps) >_build/other-steps.out 2>&1 &
    bg=$!
}

echo "== format (clang-format)"
build-aux/check-format.sh || step_failed "format"

echo "== build (-Werror)"
if (cd _build && ../configure -q --enable-werror --enable-assertions $cuda && make -s -j"$jobs"); then
    if [ "$serial" != 1 ]; then
        echo "== in the background, niced: ASan+UBSan build and C tests, distcheck, fuzzing"
        start_other_steps
    fi
    echo "== make check"
    (cd _build && make -k -j"$jobs" check >check.out 2>&1) || step_failed "make check"
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

EXTRA_FAILED=$extra_failed EXTRA_FAILED_WHAT="$extra_what" build-aux/test-summary.sh _build _build-asan
