#!/bin/bash
# Issue 18 on a machine with several GPUs (the device tool's nvidia-h100-x2
# and larger kinds): placement by the broker, a gang of two GPUs, and a move
# of a checkpointed process onto another GPU.  Built here, run there:
#   bash tests/gpu/make_carry.sh                       (here)
#   run: bash tests/gpu/multi_gpu.sh [SECTION...]      carry: [".carry"]
# Sections: probe (move_probe: the driver's gpuPairs restore, with the child
# seeing its GPU only and both), place (the broker places sessions; a
# ×2 session; what nvidia-smi shows), move (the broker moves a parked
# notebook).  Writes $OUT/multi_gpu.txt and JSON lines to $OUT/results.jsonl.
set -u
sections=" ${*:-probe place move} "
want() { [[ $sections == *" $1 "* ]]; }
C=$PWD/.carry
OUT=${OUT:-/tmp/gpushare-out}
mkdir -p "$OUT" /tmp/gs
export LD_LIBRARY_PATH=$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
HOOK=$C/gpushare/libgpushare-hook.so
R=$OUT/results.jsonl
L=$OUT/multi_gpu.txt
: >"$R"
: >"$L"
say() { echo "$*" | tee -a "$L"; }
record() { echo "{\"test\": \"$1\", \"result\": ${2:-null}}" >>"$R"; say "$1: ${2:-null}"; }

{
    nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader
    cat "$C/commit.txt"
} 2>&1 | tee -a "$L"

# 1. The driver alone: restore a checkpointed process onto GPU 1.
if want probe; then
    for mode in visible all; do
        say "== move_probe 2048 MiB, child sees: $mode"
        timeout 120 "$C/bin/move_probe" 2048 "$mode" 2>&1 | tee -a "$L" | tee "$OUT/probe-$mode.txt"
        record "move_probe/$mode" "$(grep summary "$OUT/probe-$mode.txt" | tail -1)"
    done
fi

start_broker() { # start_broker NAME [ARGS...]
    local name=$1
    shift
    export GPUSHARE_BROKER=ipc:///tmp/gs/$name.sock
    "$C/gpushare/gpushare-broker" -v -e "$GPUSHARE_BROKER" --event-log "$OUT/$name-events.jsonl" \
        "$@" >"$OUT/$name-broker.log" 2>&1 &
    broker=$!
    timeout 20 grep -q -m1 "listening on" <(tail -F "$OUT/$name-broker.log" 2>/dev/null) ||
        say "broker $name did not start: $(tail -5 "$OUT/$name-broker.log")"
}
tell() { timeout 5 sh -c "echo go >'$1'" || say "nobody reads $1 (the process died: see its .err)"; }
stop_broker() { kill "$broker" 2>/dev/null; wait "$broker" 2>/dev/null; }

# A session's process: 1 GiB on each GPU it sees, its UUIDs, then it waits
# for a line on stdin.
HOLD='
import sys, torch
n = torch.cuda.device_count()
xs = [torch.ones(256 << 20, device="cuda:%d" % i) for i in range(n)]
for x in xs: x.mul_(2)
torch.cuda.synchronize()
print("UUIDS", n, " ".join(str(torch.cuda.get_device_properties(i).uuid) for i in range(n)), flush=True)
sys.stdin.readline()
ok = all(float(x[0]) == 2.0 for x in xs)
print("DONE", ok, flush=True)
'

# 2. Placement: spread puts two sessions on two GPUs, a third (×2) session
#    holds both together; nvidia-smi shows where each process is.
if want place; then
    start_broker place
    pids=()
    for s in a b; do
        mkfifo "/tmp/gs/in-$s"
        (exec 3<>"/tmp/gs/in-$s"; env LD_PRELOAD=$HOOK GPUSHARE_SESSION=place-$s \
            timeout 120 python3 -c "$HOLD" <&3 >"$OUT/place-$s.out" 2>"$OUT/place-$s.err") &
        pids+=($!)
    done
    for s in a b; do
        timeout 60 grep -q -m1 UUIDS <(tail -F "$OUT/place-$s.out" 2>/dev/null) ||
            say "session $s did not start: $(tail -3 "$OUT/place-$s.err")"
    done
    say "== placement: sessions a and b (spread)"
    cat "$OUT/place-a.out" "$OUT/place-b.out" | tee -a "$L"
    nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader | tee -a "$L"
    "$C/gpushare/gpushare" status | tee -a "$L"
    "$C/gpushare/gpushare" status --json >"$OUT/place-status.json"
    for s in a b; do tell "/tmp/gs/in-$s"; done
    wait "${pids[@]}"
    cat "$OUT/place-a.out" "$OUT/place-b.out" | grep DONE | tee -a "$L"
    say "== a session of two GPUs (GPUSHARE_GPUS=2)"
    mkfifo /tmp/gs/in-g
    (exec 3<>/tmp/gs/in-g; env LD_PRELOAD=$HOOK GPUSHARE_SESSION=place-g GPUSHARE_GPUS=2 \
        timeout 120 python3 -c "$HOLD" <&3 >"$OUT/place-g.out" 2>"$OUT/place-g.err") &
    g=$!
    timeout 60 grep -q -m1 UUIDS <(tail -F "$OUT/place-g.out" 2>/dev/null)
    cat "$OUT/place-g.out" | tee -a "$L"
    "$C/gpushare/gpushare" status --json >"$OUT/place-gang-status.json"
    python3 - "$OUT/place-gang-status.json" <<'PY' | tee -a "$L"
import json, sys
st = json.load(open(sys.argv[1]))
for g in st["gpus"]:
    print(g["index"], g["uuid"], "holders", g["holders"],
          [(e["id"], e.get("placed"), e.get("gang")) for e in g["sessions"]])
PY
    tell /tmp/gs/in-g
    wait "$g"
    grep DONE "$OUT/place-g.out" | tee -a "$L"
    grep '"placed"' "$OUT/place-events.jsonl" | tee -a "$L"
    record "placement" "$(python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
u = {s: open(os.path.join(out, "place-%s.out" % s)).read().split("UUIDS")[1].split("\n")[0].split()[1:]
     for s in "abg"}
print(json.dumps({"a": u["a"], "b": u["b"], "g": u["g"], "a_b_apart": u["a"] != u["b"],
                  "g_sees": len(u["g"])}))
PY
)"
    stop_broker
fi

# 3. A move: two notebooks of 55 % of a card each, placed together (pack) on
#    GPU 0; the second's allocation parks the first (checkpoint tier); the
#    first's next cell finds GPU 0 full and GPU 1 empty, and the broker
#    restores it onto GPU 1 (cuCheckpointProcessRestore with GPU pairs).
if want move; then
    mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    gib=$((mib * 55 / 100 / 1024))
    d=$OUT/move
    mkdir -p "$d"
    say "== move: two notebooks of $gib GiB, pack"
    PARK_N=2 PARK_SET="placement=pack" timeout "${MOVE_TIMEOUT:-420}" python3 tests/gpu/park_rotation.py \
        "$C" "$d" "$gib" 1 >"$d/park.jsonl" 2>>"$OUT/errors.log"
    grep -h '"event":"placed"\|"event":"moved"\|"event":"move_refused"\|"event":"park"\|"event":"unpark"' \
        "$d/park-events.jsonl" | tee -a "$L"
    tee -a "$L" <"$d/park.jsonl"
    while read -r line; do record "move" "$line"; done <"$d/park.jsonl"
fi
