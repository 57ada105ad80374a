#!/bin/bash
# What the swap tier's segment size costs an allocation: cuMemAlloc +
# cuMemFree pairs (bench/alloc_bench.c, best of 3 rounds per size) natively
# and under the hook with segments of 1 GiB and of 256 MiB (the default
# since 2026-12-05), the two hooked runs alternated ROUNDS times so that a
# drift of the machine falls on both.  One JSON line per run and size on
# stdout, tagged with the configuration and round.  From the repository
# root on the GPU machine, with .carry built by tests/gpu/make_carry.sh:
#   bash bench/seg_alloc_ab.sh [ROUNDS] > seg-alloc.jsonl
set -u
cd "$(dirname "$0")/.."
C=$PWD/.carry
rounds=${1:-3}
export LD_LIBRARY_PATH=$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
hook=$C/gpushare/libgpushare-hook.so
tag() { sed "s/^{/{\"config\":\"$1\",\"round\":$2,/"; }
timeout 120 "$C/bin/alloc_bench" | tag native 0
for r in $(seq 1 "$rounds"); do
    for seg in 1024M 256M; do
        # No broker: the hook runs ungated, the swap tier still backs
        # every allocation (what is measured here).
        timeout 120 env LD_PRELOAD="$hook" GPUSHARE_SWAP=on GPUSHARE_SWAP_SEGMENT=$seg \
            GPUSHARE_BROKER=ipc:///nonexistent/gs.sock "$C/bin/alloc_bench" 2>/dev/null |
            tag "hook-swap-$seg" "$r"
    done
done
