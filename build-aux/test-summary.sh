#!/bin/sh
# Add up automake's test-suite.log files under the given build directories
# (every TAP line of every test program is one test) and print the one
# closing line CI reads: "N passed, N failed, N skipped".
# Extra failures (a build step that failed before its tests could run) are
# passed as EXTRA_FAILED=n and named in EXTRA_FAILED_WHAT.
set -u
pass=0 fail=0 skip=0
for dir in "$@"; do
    for log in $(find "$dir" -name test-suite.log -not -path '*/_inst/*' -not -path '*/gpushare-[0-9]*/*' 2>/dev/null); do
        eval "$(awk '
            /^# PASS: /  {p+=$3} /^# XFAIL: / {p+=$3}
            /^# FAIL: /  {f+=$3} /^# ERROR: / {f+=$3} /^# XPASS: / {f+=$3}
            /^# SKIP: /  {s+=$3}
            END {printf "p=%d f=%d s=%d\n", p, f, s}' "$log")"
        pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
        [ "$f" -eq 0 ] || echo "failures in $log:" && grep -E '^(FAIL|ERROR|XPASS):' "$log" | sed 's/^/  /'
    done
done
fail=$((fail + ${EXTRA_FAILED:-0}))
[ "${EXTRA_FAILED:-0}" -eq 0 ] || echo "also failed: ${EXTRA_FAILED_WHAT:-}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
