#!/bin/bash
# The multi-stream launch benchmark runs on the simulated driver: native and
# under the hook granted by a broker, one row per stream count.  A smoke
# test of the machinery (bench/run_null_launch_streams.sh), not of speed.
# TAP on stdout.
set -u
b=${GS_BUILDDIR:?}
s=${GS_SRCDIR:?}
# In sanitizer builds the preloaded hook precedes libasan in the list.
export ASAN_OPTIONS=verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
echo "1..2"
out=$(mktemp /tmp/gsnls-test.XXXXXX)
table=$(NLS_ROUNDS=1 NLS_ARGS="20 64 1,4,8,16" bash "$s/bench/run_null_launch_streams.sh" "$b" "$out" 2>&1)
rc=$?
echo "$table" | sed 's/^/# /'
rows=$(grep -c '"run": "hook+broker"' "$out")
if [ $rc -eq 0 ] && [ "$rows" -eq 4 ] && [ "$(grep -c '"run": "native"' "$out")" -eq 4 ]; then
    echo "ok 1 - a line per stream count, native and under the hook"
else
    echo "not ok 1 - a line per stream count, native and under the hook (rc $rc, $rows hooked lines)"
fi
if grep '"run": "hook+broker"' "$out" | grep -q '"gate": 1,' &&
    ! grep '"run": "hook+broker"' "$out" | grep -qv '"gate": 1,'; then
    echo "ok 2 - the hooked run was granted (every launch through the stream cache)"
else
    echo "not ok 2 - the hooked run was granted (every launch through the stream cache)"
fi
rm -f "$out"
