#!/bin/sh
# gpushare builds out of tree (quickstart.sh in _build-run, check.sh and
# README's "Building by hand" in _build).  A source tree that was
# configured in place makes every out-of-tree configure refuse ("source
# directory already configured"); this cleans it, once, saying so.
set -eu
cd "$(dirname "$0")/.."
[ -f config.status ] || exit 0
echo "out-of-tree: this source tree was configured in place; gpushare builds in a" >&2
echo "  directory of its own (_build, _build-run): running 'make distclean' here first" >&2
if [ -f Makefile ]; then
    make -s distclean >/dev/null 2>&1 || true
fi
if [ -f config.status ]; then
    echo "out-of-tree: 'make distclean' left config.status; remove it by hand" >&2
    exit 1
fi
