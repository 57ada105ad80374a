#!/bin/bash
# Install what is missing, build gpushare into ./_prefix, and run it: the
# broker plus a Jupyter Notebook server offering the "Shared GPU" kernel.
# Without an NVIDIA driver it runs on the test suite's simulated GPU and
# says so.  Options are passed to build-aux/run-demo.sh (--port N, --smoke).
set -eu
cd "$(dirname "$0")"
here=$(pwd)
build-aux/install-deps.sh
autoreconf -fi >/dev/null
mkdir -p _build-run
(cd _build-run && { [ -f Makefile ] || ../configure -q --prefix="$here/_prefix"; } && make -s -j"$(nproc)" && make -s install)
exec build-aux/run-demo.sh --prefix "$here/_prefix" --simdir "$here/_build-run/tests/simcuda" \
    --notebooks "$here/examples" "$@"
