#!/bin/bash
# The evaluation suite (issue 8), from the repository root:
#   bash bench/eval/run.sh [SECTION...]
# Sections: cost pairs bigpairs bigpairs32 capacity park interactive reclaim
# scale (default: all; on the simulated GPU all but park).
# On the GPU machine it runs what tests/gpu/make_carry.sh built into .carry/
# (device tool: carry [".carry"]); with EVAL_BACKEND=sim it runs the build
# tree on the simulated GPU.  Results (CSV, meta-*.json, event logs, logs,
# machine.txt) go to EVAL_RESULTS (default /tmp/gs-eval); where $OUT is set
# (the device tool brings back at most 8 files from it), they are also
# packed into $OUT/eval-SECTIONS.tar.gz after every section, so a command
# stopped at its limit still returns the sections it finished.
# bench/eval/report.py turns them into doc/evaluation.md.  Each section runs
# under its own timeout (EVAL_SECTION_TIMEOUT, default 480 s, and all of them
# within EVAL_DEADLINE_S, default 570 s); eval.py ends
# every process it started (brokers first: they unpark), and this script
# ends any it left.
set -u
cd "$(dirname "$0")/../.."
RES=${EVAL_RESULTS:-/tmp/gs-eval}
mkdir -p "$RES"
backend=${EVAL_BACKEND:-torch}
if [ "$backend" = sim ]; then
    sections=${*:-cost pairs bigpairs bigpairs32 capacity interactive reclaim scale}
else
    sections=${*:-cost pairs bigpairs bigpairs32 capacity park interactive reclaim scale}
fi
if [ "$backend" = sim ]; then
    py=${EVAL_PYTHON:-/usr/bin/python3}
else
    py=${EVAL_PYTHON:-python3}
    export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fi

# The machine, for every figure.
# (what .carry holds on the GPU machine; the checkout on the simulated GPU)
if [ "$backend" = sim ]; then
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
else
    commit=$(cat .carry/commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "backend: $backend"
    if [ "$backend" = sim ]; then
        echo "gpu: simulated (tests/simcuda), ${EVAL_SIM_MEMORY:-2G}"
    else
        echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
        $py -c 'import torch, torchvision; print("torch:", torch.__version__, "cuda:", torch.version.cuda, "torchvision:", torchvision.__version__)' 2>&1
    fi
    echo "python: $($py -c 'import sys; print(sys.version.split()[0])')"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    echo "kernel: $(uname -r)"
    echo "gpushare: $commit"
} >"$RES/machine.txt"
cat "$RES/machine.txt"

knobs=$(env | grep -E '^EVAL_[A-Z_]+=' | sort | tr '\n' ' ')
pack=
[ -n "${OUT:-}" ] && [ "$OUT" != "$RES" ] && pack="$OUT/eval-$(echo $sections | tr ' ' '_').tar.gz"
set -o pipefail
rc=0
# The whole command ends before EVAL_DEADLINE_S (the device tool stops a
# command at 600 s): a section gets what is left, less a margin for the
# cleanup; one that would get less than a minute is skipped.
deadline=${EVAL_DEADLINE_S:-570}
for s in $sections; do
    left=$((deadline - SECONDS - 15))
    limit=${EVAL_SECTION_TIMEOUT:-480}
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 60 ]; then
        echo "run.sh: skipping $s: ${left} s left before the deadline" | tee -a "$RES/eval.log"
        rc=1
        continue
    fi
    timeout -k 60 "$limit" "$py" bench/eval/eval.py --out "$RES" --commit "$commit" \
        --command "${knobs}bash bench/eval/run.sh $s" "$s" 2>&1 | tee -a "$RES/eval.log" || rc=1
    # Should eval.py itself have been killed, end what it started (it
    # records the process group of every child it starts).
    if [ -f "$RES/.children" ]; then
        while read -r pg; do kill -KILL -- "-$pg" 2>/dev/null; done <"$RES/.children"
        rm -f "$RES/.children"
    fi
    [ -n "$pack" ] && tar -czf "$pack" -C "$RES" . && cp "$RES/eval.log" "$OUT/"
done
ls "$RES"
exit $rc
