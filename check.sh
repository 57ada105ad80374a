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
# The last line is "N passed, N failed, N skipped".  .ci/run runs this.
set -u
cd "$(dirname "$0")"
jobs=$(nproc)
extra_failed=0 extra_what=""
step_failed() { extra_failed=$((extra_failed + 1)); extra_what="$extra_what $1"; echo "check: FAILED: $1"; }

build-aux/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }
build-aux/out-of-tree.sh || { echo "0 passed, 1 failed"; exit 1; }
autoreconf -fi >/dev/null 2>&1 || { autoreconf -fi; echo "0 passed, 1 failed"; exit 1; }

rm -rf _build _build-asan
mkdir -p _build _build-asan

echo "== format (clang-format)"
build-aux/check-format.sh || step_failed "format"

echo "== build (-Werror)"
if (cd _build && ../configure -q --enable-werror --enable-assertions ${CUDA_DIR:+--with-cuda=$CUDA_DIR} && make -s -j"$jobs"); then
    echo "== make check"
    (cd _build && make -k -j"$jobs" check >check.out 2>&1) || step_failed "make check"
    grep -E '^(PASS|FAIL|SKIP|ERROR|XPASS|XFAIL): ' _build/check.out | grep -v '^PASS' | head -50
    # A failure only CI saw must be readable from CI's output alone.
    grep -lE '^(FAIL|ERROR): ' $(find _build/tests -name '*.log' ! -name test-suite.log) 2>/dev/null |
        head -5 | while read -r log; do echo "== $log (last 60 lines)"; tail -60 "$log"; done
else
    step_failed "build"
fi

echo "== ASan+UBSan build, C tests"
san="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
if (cd _build-asan && ../configure -q --enable-werror --enable-assertions ${CUDA_DIR:+--with-cuda=$CUDA_DIR} CFLAGS="$san" LDFLAGS="-fsanitize=address,undefined" &&
    make -s -j"$jobs"); then
    (cd _build-asan && make -k -j"$jobs" -C tests/unit check >check.out 2>&1) ||
        step_failed "sanitizer unit tests"
    (cd _build-asan && make -k -j"$jobs" -C tests/simcuda check >>check.out 2>&1) ||
        step_failed "sanitizer simulated-driver tests"
    (cd _build-asan && make -k -j"$jobs" -C tests/hook check >>check.out 2>&1) ||
        step_failed "sanitizer hook tests"
else
    step_failed "sanitizer build"
fi

echo "== fuzzing (libFuzzer, tests/fuzz/run.sh)"
tests/fuzz/run.sh || step_failed "fuzz"

if [ "${GPUSHARE_SKIP_DISTCHECK:-0}" != 1 ]; then
    echo "== make distcheck"
    # The tarball builds, installs and passes its C tests (the integration
    # suite ran above: distcheck configures --disable-integration-tests),
    # and holds every tracked file that suite or anything else needs.
    (cd _build && make -s -j"$jobs" distcheck >distcheck.out 2>&1) || { tail -40 _build/distcheck.out; step_failed "distcheck"; }
    build-aux/check-dist-complete.sh _build/gpushare-*.tar.gz || step_failed "tarball complete"
fi

EXTRA_FAILED=$extra_failed EXTRA_FAILED_WHAT="$extra_what" build-aux/test-summary.sh _build _build-asan
