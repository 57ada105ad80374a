#!/bin/bash
# Install what building and running needs (not the test stack: check.sh
# installs that), build gpushare into ./_prefix, and run it: the broker
# plus a Jupyter Notebook server offering the "Shared GPU" kernel.
# Without an NVIDIA driver it runs on the test suite's simulated GPU and
# says so.  Options go to build-aux/run-demo.sh: --port N (default 8888),
# --smoke.  CUDA_DIR=/path: where the CUDA headers are (include/cuda.h).
set -eu
cd "$(dirname "$0")"
here=$(pwd)
build-aux/install-deps.sh --run
build-aux/out-of-tree.sh
autoreconf -fi >/dev/null
mkdir -p _build-run
(cd _build-run && { [ -f Makefile ] || ../configure -q --prefix="$here/_prefix" ${CUDA_DIR:+--with-cuda="$CUDA_DIR"}; } &&
    make -s -j"$(nproc)" && make -s install >/dev/null)
exec build-aux/run-demo.sh --prefix "$here/_prefix" --simdir "$here/_build-run/tests/simcuda" \
    --notebooks "$here/examples" "$@"
