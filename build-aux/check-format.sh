#!/bin/sh
# Every C file of the product, its tests and benchmarks must be formatted as
# .clang-format says (clang-format 14, Debian 12's).  Prints the files that
# are not, with the first difference, and exits 1; `clang-format -i FILE`
# fixes one.
cd "$(dirname "$0")/.." || exit 1
command -v clang-format >/dev/null || { echo "check-format: clang-format is missing" >&2; exit 1; }
bad=0
for f in $(find broker cli common libhook launcher bench tests/simcuda tests/unit tests/hook tests/fuzz \
        -name '*.[ch]' | sort); do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "check-format: $f is not formatted (clang-format -i $f):"
        clang-format "$f" | diff -u "$f" - | head -12
        bad=1
    fi
done
[ "$bad" = 0 ] && echo "check-format: every C file is formatted"
exit "$bad"
