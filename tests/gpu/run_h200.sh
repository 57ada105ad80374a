#!/bin/bash
# The hook's validation and benchmarks on a real GPU (the H200 device
# machine).  Everything is built on the development machine and carried in
# .carry/ (see tests/gpu/README.md); this script only runs things and writes
# JSON lines to $OUT/results.jsonl plus logs.
#   bash tests/gpu/run_h200.sh [SECTION...]   (from the repository root)
# Sections: validate launch launch_streams torch revoke broker park disk fastpark
# swap pressure users ipc death notebook (default: all but park, disk, fastpark, swap and pressure,
# which run alone, and launch_streams, ~4 minutes of its own).
set -u
sections=" ${*:-validate launch torch revoke broker notebook} "
want() { [[ $sections == *" $1 "* ]]; }
C=$PWD/.carry
OUT=${OUT:-/tmp/gpushare-out}
mkdir -p "$OUT" /tmp/gs
export LD_LIBRARY_PATH=$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HOOK=$C/gpushare/libgpushare-hook.so
R=$OUT/results.jsonl
: >"$R"
cupti_dir=$(dirname "$(find / -name 'libcupti.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)")

record() { # record TAG JSON
    local tag=$1 json=$2
    [ -n "$json" ] || json='{"error": "no output"}'
    echo "{\"test\": \"$tag\", \"result\": $json}" >>"$R"
    echo "$tag: $json"
}

# The machine, for every figure.
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nproc; uname -r
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

export GPUSHARE_BROKER=ipc:///tmp/gs/broker.sock
"$C/gpushare/gpushare-broker" -v >"$OUT/broker.log" 2>&1 &
broker=$!
timeout 20 grep -q -m1 "listening on" <(tail -F "$OUT/broker.log" 2>/dev/null) || { echo "broker did not start"; cat "$OUT/broker.log"; }
"$C/gpushare/gpushare" status >>"$OUT/broker.log" 2>&1


# 1. Results identical to native; launch counts equal to CUPTI's.
want validate && for prog in validate_cuda_shared validate_cuda_static; do
    record "$prog/native" "$(timeout 120 "$C/bin/$prog" 2>>"$OUT/errors.log")"
    record "$prog/hook" "$(timeout 120 env LD_PRELOAD=$HOOK "$C/bin/$prog" 2>>"$OUT/errors.log")"
    rm -f "$OUT/cupti.json"
    out=$(timeout 120 env LD_PRELOAD=$HOOK CUDA_INJECTION64_PATH=$C/lib/libcupti_count.so \
        CUPTI_COUNT_FILE=$OUT/cupti.json LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$cupti_dir \
        "$C/bin/$prog" 2>>"$OUT/errors.log")
    record "$prog/hook+cupti" "{\"program\": ${out:-null}, \"cupti\": $(cat "$OUT/cupti.json" 2>/dev/null || echo null)}"
done
want validate && record "torch_check/native" "$(timeout 300 python3 tests/gpu/torch_check.py 2>>"$OUT/errors.log")"
want validate && record "torch_check/hook" "$(timeout 300 env LD_PRELOAD=$HOOK python3 tests/gpu/torch_check.py 2>>"$OUT/errors.log")"
want validate && rm -f "$OUT/cupti.json" && out=$(timeout 300 env LD_PRELOAD=$HOOK CUDA_INJECTION64_PATH=$C/lib/libcupti_count.so \
    CUPTI_COUNT_FILE=$OUT/cupti.json LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$cupti_dir \
    python3 tests/gpu/torch_check.py 2>>"$OUT/errors.log")
want validate && record "torch_check/hook+cupti" "{\"program\": ${out:-null}, \"cupti\": $(cat "$OUT/cupti.json" 2>/dev/null || echo null)}"

# 2. Launch fast path: native, hook with the broker granting, hook without a
#    broker (ungated); interleaved rounds.
want launch && for round in $(seq "${LAUNCH_ROUNDS:-3}"); do
    record "null_launch/native/$round" "$(timeout 120 "$C/bin/null_launch" 2>>"$OUT/errors.log")"
    record "null_launch/hook+broker/$round" "$(timeout 120 env LD_PRELOAD=$HOOK "$C/bin/null_launch" 2>>"$OUT/errors.log")"
    record "null_launch/hook-ungated/$round" "$(timeout 120 env LD_PRELOAD=$HOOK GPUSHARE_BROKER=ipc:///tmp/gs/none.sock "$C/bin/null_launch" 2>>"$OUT/errors.log")"
done

# 2b. Launches cycling over 1, 4, 8 and 16 streams (the hook's per-thread
#     stream cache): native, and under the hook granted by a broker of the
#     script's own with the real driver side by side; rounds interleaved.
#     Prints a table; one JSON line per run and stream count.
if want launch_streams; then
    # A hook built from another commit, if carried, runs beside it:
    # .carry/gpushare/libgpushare-hook-baseline.so (doc/hook-h200.md says how).
    base=$C/gpushare/libgpushare-hook-baseline.so
    [ -f "$base" ] && export NLS_BASELINE_HOOK=$base
    NLS_PROGRAM=$C/bin/null_launch_streams NLS_HOOK=$HOOK NLS_BROKER=$C/gpushare/gpushare-broker \
        NLS_ROUNDS=${LAUNCH_ROUNDS:-3} timeout 540 bash bench/run_null_launch_streams.sh "$C" \
        "$OUT/launch-streams.jsonl" 2>>"$OUT/errors.log" | tee "$OUT/launch-streams.txt"
    while read -r line; do record "null_launch_streams" "$line" >/dev/null; done <"$OUT/launch-streams.jsonl"
fi

# 3. A ResNet-50 training and inference step, native vs hook with the broker.
want torch && for round in 1 2 3; do
    record "torch_step/native/$round" "$(timeout 200 python3 bench/torch_step.py 2>>"$OUT/errors.log")"
    record "torch_step/hook+broker/$round" "$(timeout 200 env LD_PRELOAD=$HOOK python3 bench/torch_step.py 2>>"$OUT/errors.log")"
done
"$C/gpushare/gpushare" status --json >"$OUT/status-after.json" 2>&1

# 4. Revoke to release on an idle GPU (bench/revoke_latency stands in for
#    the broker; the hook never releases on its own here).
if want revoke; then
    python3 -c 'import ctypes; print("membarrier query:", ctypes.CDLL(None).syscall(324, 0, 0, 0))' >>"$OUT/machine.txt"
    timeout 60 "$C/gpushare/revoke_latency" ipc:///tmp/gs/rl.sock 200 5 >"$OUT/revoke.json" 2>>"$OUT/errors.log" &
    rl=$!
    timeout 60 env LD_PRELOAD=$HOOK GPUSHARE_BROKER=ipc:///tmp/gs/rl.sock GPUSHARE_IDLE_RELEASE_MS=0 \
        GPUSHARE_LOG=debug "$C/bin/sporadic" 4 5000 >"$OUT/revoke-hook.log" 2>&1
    wait $rl
    record "revoke_latency" "$(cat "$OUT/revoke.json")"
    # The same on a GPU that is idle when the revoke comes: revoked 2 ms
    # after each grant, while the program sleeps 5 ms after each launch
    # (above, revoke and launch share the 5 ms period and often collide),
    # and without the debug log.
    timeout 60 "$C/gpushare/revoke_latency" ipc:///tmp/gs/rl2.sock 300 2 >"$OUT/revoke-idle.json" 2>>"$OUT/errors.log" &
    rl=$!
    timeout 60 env LD_PRELOAD=$HOOK GPUSHARE_BROKER=ipc:///tmp/gs/rl2.sock GPUSHARE_IDLE_RELEASE_MS=0 \
        "$C/bin/sporadic" 3 5000 >>"$OUT/revoke-hook.log" 2>&1
    wait $rl
    record "revoke_latency/idle" "$(cat "$OUT/revoke-idle.json")"
    # The platform's floor: a ZeroMQ round trip between two processes.
    record "zmq_rtt/gap5ms" "$("$C/gpushare/zmq_rtt" 200 5)"
    record "zmq_rtt/back-to-back" "$("$C/gpushare/zmq_rtt" 2000 0)"
fi

# 5. The broker's own costs on this (quiet, 16-core) machine.
if want broker; then
    bash bench/run_broker_bench.sh "$C/bb" "$OUT/broker-bench.jsonl" 2>>"$OUT/errors.log"
    while read -r line; do record "broker_bench" "$line"; done <"$OUT/broker-bench.jsonl"
fi

# 6. Parking: three notebooks of 60 GiB each (more than the card) in turn.
if want park; then
    timeout "${PARK_TIMEOUT:-560}" python3 tests/gpu/park_rotation.py "$C" "$OUT" "${PARK_GIB:-60}" "${PARK_ROUNDS:-2}" \
        >"$OUT/park.jsonl" 2>>"$OUT/errors.log"
    while read -r line; do record "park" "$line"; done <"$OUT/park.jsonl"
fi

# 6-disk. The disk tier (issue 37): the disk's own speed, then a notebook of
#     DISK_GIB (8) GiB parked to disk and back, bit-exact
#     (tests/gpu/disk_tier.py; its last line is the result row).
if want disk; then
    rm -rf /tmp/gsdisk
    timeout "${DISK_TIMEOUT:-500}" python3 tests/gpu/disk_tier.py "$C" "$OUT" "${DISK_GIB:-8}" /tmp/gsdisk \
        >"$OUT/disk.jsonl" 2>>"$OUT/errors.log"
    while read -r line; do record "disk" "$line"; done <"$OUT/disk.jsonl"
    rm -rf /tmp/gsdisk
fi

# 6a. Park and unpark side by side in one run (issue 14): 32 GiB PyTorch
#     notebooks (five: more than the card) in turn on the swap tier with the
#     default allocator and with expandable segments, and on the checkpoint
#     tier; then the GPU memory of a bare PyTorch context, natively.
#     bench/fastpark_summary.py writes one line per park/unpark.
if want fastpark; then
    for v in ${FASTPARK_VARIANTS:-swap swap-expandable checkpoint}; do
        d=$OUT/fastpark-$v
        mkdir -p "$d"
        conf="" sw=1
        [ $v = swap-expandable ] && conf=expandable_segments:True
        [ $v = checkpoint ] && sw=0
        PYTORCH_CUDA_ALLOC_CONF=$conf PARK_SWAP=$sw PARK_N=5 PARK_HOST_BUDGET=${FASTPARK_BUDGET:-100G} \
            timeout "${FASTPARK_TIMEOUT:-250}" python3 tests/gpu/park_rotation.py "$C" "$d" "${FASTPARK_GIB:-32}" 1 \
            >"$d/park.jsonl" 2>>"$OUT/errors.log"
    done
    timeout 60 python3 tests/gpu/context_footprint.py >"$OUT/fastpark-context.json" 2>>"$OUT/errors.log"
    python3 bench/fastpark_summary.py "$OUT" >"$OUT/fastpark.jsonl"
    while read -r line; do record "fastpark" "$line"; done <"$OUT/fastpark.jsonl"
fi

# 6b. The swap tier's backing (GPUSHARE_SWAP=on) against native: exact
#     results of PyTorch (default allocator, expandable segments, the async
#     allocator), torch.multiprocessing CUDA sharing, CuPy, JAX, pointer
#     attributes, and cuMemAlloc/cuMemFree costs.
if want swap; then
    SW="env LD_PRELOAD=$HOOK GPUSHARE_SWAP=on"
    for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
        tag=${conf:-default}
        record "swap/torch_check/$tag/native" "$(PYTORCH_CUDA_ALLOC_CONF=$conf timeout 300 python3 tests/gpu/torch_check.py 2>>"$OUT/errors.log")"
        record "swap/torch_check/$tag/hook-swap" "$(PYTORCH_CUDA_ALLOC_CONF=$conf timeout 300 $SW python3 tests/gpu/torch_check.py 2>>"$OUT/errors.log")"
    done
    for what in mp cupy jax attrs; do
        record "swap/$what/native" "$(timeout 200 python3 tests/gpu/swap_check.py $what 2>>"$OUT/errors.log")"
        record "swap/$what/hook-swap" "$(timeout 200 $SW python3 tests/gpu/swap_check.py $what 2>>"$OUT/errors.log")"
    done
    "$C/bin/alloc_bench" >"$OUT/alloc-native.jsonl" 2>>"$OUT/errors.log"
    $SW "$C/bin/alloc_bench" >"$OUT/alloc-swap.jsonl" 2>>"$OUT/errors.log"
    env LD_PRELOAD=$HOOK "$C/bin/alloc_bench" >"$OUT/alloc-hook.jsonl" 2>>"$OUT/errors.log"
    while read -r line; do record "swap/alloc/native" "$line"; done <"$OUT/alloc-native.jsonl"
    while read -r line; do record "swap/alloc/hook" "$line"; done <"$OUT/alloc-hook.jsonl"
    while read -r line; do record "swap/alloc/hook-swap" "$line"; done <"$OUT/alloc-swap.jsonl"
fi

# 6c. Memory under pressure (issue 33): notebooks sized from the card and
#     the host (tests/gpu/pressure.py: "many", 5 x 24 GiB on an 80 GB card
#     with 128 GiB of RAM, and "big", 2 x 40 GiB), both tiers side by side,
#     the broker with its default settings but park_idle_s=0; first within
#     GPU + host capacity, then one notebook beyond it.  Each configuration
#     runs under its own timeout (PRESSURE_TIMEOUT, default 420 s shared
#     between them), the script's own deadline 40 s before it so that it
#     stops everything it started and writes its summary.
# 6d. Broker death (issue 33): a notebook parked on the checkpoint tier, and
#     one on the swap tier, come back without any broker
#     (tests/gpu/broker_death.py; the hook starts gpushare-restore).
if want death; then
    d=$OUT/broker-death
    mkdir -p "$d"
    timeout -k 15 240 python3 tests/gpu/broker_death.py "$C" "$d" >"$d/stdout.jsonl" 2>>"$OUT/errors.log"
    cat "$d/stdout.jsonl"
fi

if want pressure; then
    confs=${PRESSURE_CONFIGS:-many big}
    [ -n "${PRESSURE_N:-}${PRESSURE_GIB:-}" ] && confs=custom
    set -- $confs
    each=$(( ${PRESSURE_TIMEOUT:-420} / $# ))
    for c in $confs; do
        d=$OUT/pressure-$c
        mkdir -p "$d"
        PRESSURE_CONFIGS=$c PRESSURE_DEADLINE_S=$(( each - 40 )) timeout -k 15 "$each" \
            python3 tests/gpu/pressure.py "$C" "$d" >"$d/stdout.jsonl" 2>>"$OUT/errors.log"
        while read -r line; do record "pressure/$c" "$line" >/dev/null; done <"$d/stdout.jsonl"
        grep '"event": "summary"' "$d/stdout.jsonl" || echo "pressure/$c: no summary (see $d)"
    done
fi

# 6c. Two ordinary users' plain programs taking turns through the system
#     broker on the checkpoint tier (issue 34: `frozen`), and CUDA IPC
#     between a PyTorch process and its child under the hook (the handle's
#     checks, hook_ipc.c).
if want users; then
    d=$OUT/users
    mkdir -p "$d"
    timeout -k 15 300 python3 tests/gpu/users_turns.py "$C" "$d" >"$d/stdout.jsonl" 2>>"$OUT/errors.log"
    while read -r line; do record "users_turns" "$line" >/dev/null; done <"$d/stdout.jsonl"
    grep '"summary"' "$d/stdout.jsonl" || echo "users_turns: no summary (see $d)"
fi
want ipc && record "ipc_check/hook" "$(timeout 180 env LD_PRELOAD=$HOOK python3 tests/gpu/ipc_check.py 1024 2>>"$OUT/errors.log")"
want ipc && record "ipc_check/native" "$(timeout 180 python3 tests/gpu/ipc_check.py 1024 2>>"$OUT/errors.log")"

# 7. Two notebooks of PyTorch cells started by gpushare-launch (issue 5):
#    mini_kernel.py publishes the IOPub status messages ipykernel would, the
#    real launcher's watcher reports the cells to a broker in the exclusive
#    policy; checked by notebook_summary.py against a native run.
if want notebook; then
    nb=/tmp/gs/nb EPN=ipc:///tmp/gs/nb.sock
    mkdir -p $nb
    "$C/gpushare/gpushare-broker" -v -e $EPN --policy exclusive --event-log "$OUT/notebook-events.jsonl" \
        >"$OUT/notebook-broker.log" 2>&1 &
    nbb=$!
    timeout 20 grep -q -m1 "listening on" <(tail -F "$OUT/notebook-broker.log" 2>/dev/null)
    export PYTHONPATH=$PWD/tests/gpu
    timeout 200 python3 tests/gpu/mini_kernel.py tests/gpu/torch_notebook.py 6 60 1 >"$OUT/nb-native.json" 2>>"$OUT/errors.log"
    nbpids=""
    for k in A B; do
        python3 tests/gpu/mini_kernel.py --write-connection $nb/kernel-nb$k.json
        GPUSHARE_HOOK=$HOOK timeout 300 "$C/gpushare/gpushare-launch" --broker $EPN --strict -- \
            python3 tests/gpu/mini_kernel.py -f $nb/kernel-nb$k.json tests/gpu/torch_notebook.py 6 60 1 \
            >"$OUT/nb-$k.json" 2>"$OUT/nb-$k.err" &
        nbpids="$nbpids $!"
    done
    timeout 60 bash -c "until GPUSHARE_BROKER=$EPN '$C/gpushare/gpushare' status | grep -q nbB; do sleep 0.2; done"
    GPUSHARE_BROKER=$EPN "$C/gpushare/gpushare" status --json >"$OUT/notebook-status.json" 2>&1
    wait $nbpids
    record "notebook" "$(python3 tests/gpu/notebook_summary.py "$OUT" 2>>"$OUT/errors.log")"
    kill $nbb 2>/dev/null
fi

kill $broker 2>/dev/null
wait
echo done
