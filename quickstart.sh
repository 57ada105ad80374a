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

# The notebook server's port before anything else: a port in use is said at
# once, not after the packages and the build.
port=8888
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    [ "${args[i]}" != --port ] || port=${args[i + 1]-}
done
build-aux/port-free.sh quickstart "$port" || exit $?

build-aux/install-deps.sh --run
build-aux/out-of-tree.sh

# A quiet build: what each step prints goes to the log, shown when it fails.
mkdir -p _build-run
log=_build-run/build.log
: >"$log"
quiet() {
    local what=$1
    shift
    if ! "$@" >>"$here/$log" 2>&1; then
        echo "quickstart: $what failed; the end of $log:" >&2
        tail -n 40 "$here/$log" >&2
        exit 1
    fi
}
echo "quickstart: building gpushare into ./_prefix (log: $log)"
started=$SECONDS
# configure exists after the first run; later changes to configure.ac or a
# Makefile.am are picked up by the Makefiles' own rebuild rules.
[ -x configure ] || quiet "autoreconf" autoreconf -fi
cd _build-run
# Only what the demo runs (--disable-dev-tools: no bench/, no test tools).
grep -q -e --disable-dev-tools config.status 2>/dev/null ||
    quiet "configure" ../configure -q --prefix="$here/_prefix" --disable-dev-tools \
        ${CUDA_DIR:+--with-cuda="$CUDA_DIR"}
quiet "the build" make -s -j"$(nproc)"
quiet "make install" make -s install
# The simulated GPU, the test suite's libcuda, when there is no NVIDIA
# driver (as run-demo.sh decides).
if ! PATH=$PATH:/sbin:/usr/sbin ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' ||
    [ -n "${GPUSHARE_FORCE_SIM:-}" ]; then
    quiet "the simulated GPU's build" make -s -C tests/simcuda libcuda.la pythonpath/gpusim.py
fi
cd ..
echo "quickstart: built and installed in $((SECONDS - started)) s"
exec build-aux/run-demo.sh --prefix "$here/_prefix" --simdir "$here/_build-run/tests/simcuda" \
    --notebooks "$here/examples" "$@"
