#!/bin/sh
# Every file git tracks is in the release tarball (TARBALL), except the
# recorded benchmark results (bench/results/: data, not source) and dotfiles
# (.gitignore, .keep).  distcheck builds the tarball and runs its C tests;
# the integration suite (tests/python) runs on the main build only, so a
# file only that suite needs, missing from EXTRA_DIST, is caught here.
# Prints what is missing and exits 1 then.
#   build-aux/check-dist-complete.sh _build/gpushare-VERSION.tar.gz
set -eu
tarball=$1
cd "$(dirname "$0")/.."
[ -f "$tarball" ] || { echo "check-dist-complete: no tarball $tarball" >&2; exit 1; }
listed=$(mktemp)
trap 'rm -f "$listed"' EXIT
top=$(tar tzf "$tarball" | head -1 | cut -d/ -f1)
tar tzf "$tarball" | sed "s|^$top/||" | sort >"$listed"
missing=$(git ls-files | grep -v -e '^bench/results/' -e '\(^\|/\)\.[^/]*$' | sort | comm -23 - "$listed")
if [ -n "$missing" ]; then
    echo "check-dist-complete: tracked files missing from $tarball (add them to EXTRA_DIST):"
    echo "$missing" | sed 's/^/  /'
    exit 1
fi
echo "check-dist-complete: every tracked file is in $tarball"
