#!/bin/bash
# Build what the GPU machine runs into .carry/ (ignored by git), from a
# build tree of its own (_build-carry): the hook, broker, CLI and benches, the
# CUDA test programs (nvcc, sm_90), a CUPTI launch counter, and the runtime
# libraries the GPU machine lacks (libzmq, czmq, jansson, libmicrohttpd and their deps, from
# Debian's archive).  Then, with the device tool:
#   run: bash tests/gpu/run_h200.sh [SECTION...]      carry: [".carry"]
#   run: bash bench/eval/run.sh [SECTION...]           (the evaluation suite)
set -eu
cd "$(dirname "$0")/../.."
root=$PWD
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
C=.carry
rm -rf "$C"
mkdir -p "$C/lib" "$C/bin" "$C/gpushare" "$C/bb/broker" "$C/bb/bench"
# A build directory of its own (release flags), so that the tree stays
# free for the out-of-tree builds of check.sh.
B=_build-carry
mkdir -p "$B"
[ -f "$B/Makefile" ] || (cd "$B" && ../configure -q)
make -C "$B" -s -j"$(nproc)"
(cd "$B" && cp libhook/.libs/libgpushare-hook.so broker/gpushare-broker cli/gpushare \
    launcher/gpushare-launch libhook/restore/gpushare-restore bench/revoke_latency bench/zmq_rtt \
    bench/cell_driver "$root/$C/gpushare/")
# Which code this is, for the results (the GPU machine gets no .git).
echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)" \
    >"$C/commit.txt"
cp "$B/bench/null_launch_streams" "$C/bin/"
cp "$B/broker/gpushare-broker" "$C/bb/broker/"
cp "$B/bench/broker_bench" "$B/bench/zmq_rtt" "$C/bb/bench/"
debs=$(mktemp -d)
(cd "$debs" && apt-get download libzmq5 libczmq4 libnorm1 libpgm-5.3-0 libsodium23 libjansson4 libmicrohttpd12 >/dev/null)
for d in "$debs"/*.deb; do dpkg -x "$d" "$debs/x"; done
cp -a "$debs"/x/usr/lib/x86_64-linux-gnu/*.so* "$C/lib/"
rm -rf "$debs"
gcc -shared -fPIC -O2 -I/usr/local/cuda/include -o "$C/lib/libcupti_count.so" \
    tests/gpu/cupti_count.c -L/usr/local/cuda/lib64 -lcupti
stubs=-L/usr/local/cuda/lib64/stubs
"$nvcc" -O2 -arch=sm_90 -o "$C/bin/null_launch" bench/null_launch.cu -lcuda -ldl $stubs
"$nvcc" -O2 -arch=sm_90 -o "$C/bin/sporadic" bench/sporadic.cu
gcc -O2 -I/usr/local/cuda/include -o "$C/bin/alloc_bench" bench/alloc_bench.c $stubs -lcuda
gcc -O2 -I/usr/local/cuda/include -o "$C/bin/move_probe" tests/gpu/move_probe.c $stubs -lcuda
"$nvcc" -O2 -arch=sm_90 -cudart shared -o "$C/bin/validate_cuda_shared" tests/gpu/validate_cuda.cu -lcuda -ldl $stubs
"$nvcc" -O2 -arch=sm_90 -cudart static -o "$C/bin/validate_cuda_static" tests/gpu/validate_cuda.cu -lcuda -ldl $stubs
du -sh "$C"
