#!/bin/sh
# One seed of the chaos test (doc/chaos.md), the seed in the file named
# (seed-N.seed): each is a test of its own, so that `make -j2 check` runs
# two seeds at once (three at once beside busy loops passed 81 of 81 runs,
# doc/chaos.md) in the time one took.
seed=$(cat "$1") || exit 99
GPUSHARE_CHAOS_SEED=$seed exec "$GS_KERNEL_PYTHON" "$GS_SRCDIR/tests/python/pytest_tap.py" \
    "$GS_SRCDIR/tests/chaos/test_chaos.py"
