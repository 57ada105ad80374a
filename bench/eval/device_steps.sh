#!/bin/bash
# The whole evaluation on the GPU machine in three steps, one device-tool
# call each (carry [".carry"], built by tests/gpu/make_carry.sh at the
# commit under test; each call within the machine's idle release of the
# last, so that all three run on one machine):
#   bash bench/eval/device_steps.sh 1   capacity park                       (~340 s on an H100)
#   bash bench/eval/device_steps.sh 2   cost interactive reclaim            (~480 s)
#   bash bench/eval/device_steps.sh 3   pairs bigpairs bigpairs32 scale     (~490 s)
# Where less device time is left: name the sections after the step number
# (`device_steps.sh 1 capacity park pairs bigpairs bigpairs32`) and set the
# sizes smaller (EVAL_AB_ROUNDS, EVAL_INTER_WINDOWS, EVAL_RECLAIM_REPS,
# EVAL_PRESSURE_DEADLINE_S, EVAL_SCALE_NS).
# (The park section runs more notebooks on an H200, five of 32 GiB and three
# of 56 GiB: step 1 has the most room left.)
# Each step leaves ONE file under $OUT, step-N.tar.gz: its results folder
# (ev-N/, logs over 2 MB left out), its output (command-N.log), the
# machine (machine-N.txt), the kernel's OOM and NVRM lines (dmesg-N.txt) and
# any disk image the capacity section left; beside it run.sh's own pack and
# eval.log.  (The device tool brings back at most 8 files: a step that left
# more lost the rest.)  Then, here:
#   tar xzf step-N.tar.gz for each, merge ev-1..3 into one folder (one
#   machine.txt), and run bench/eval/report.py on it (bench/results/README.md).
set -u
cd "$(dirname "$0")/../.."
step=${1:?usage: device_steps.sh 1|2|3 [SECTION...]}
out=${OUT:-/tmp/gs-steps}
res=/tmp/ev-$step
rm -rf "$res" /tmp/step-pack
mkdir -p "$out" /tmp/step-pack
case $step in
1) sections="capacity park" ;;
2) sections="cost interactive reclaim" ;;
3) sections="pairs bigpairs bigpairs32 scale" ;;
*) echo "device_steps.sh: no step $step (1, 2 or 3)" >&2; exit 2 ;;
esac
# Sections named after the step run instead of its own (the whole evaluation
# in two calls where less device time is left); each section's sizes below
# are defaults a call may set smaller.
shift
[ $# -gt 0 ] && sections="$*"
set -- $sections
export EVAL_PRESSURE_CONFIGS="${EVAL_PRESSURE_CONFIGS:-disk many}" \
       EVAL_PRESSURE_DEADLINE_S=${EVAL_PRESSURE_DEADLINE_S:-240} \
       EVAL_AB_ROUNDS=${EVAL_AB_ROUNDS:-12} EVAL_INTER_WINDOWS=${EVAL_INTER_WINDOWS:-4} \
       EVAL_RECLAIM_REPS=${EVAL_RECLAIM_REPS:-4} \
       EVAL_TQS=${EVAL_TQS:-1} EVAL_SCALE_NS=${EVAL_SCALE_NS:-1,2,4,8}
export EVAL_DEADLINE_S=${EVAL_DEADLINE_S:-550} EVAL_RESULTS=$res
# (run.sh also packs into $OUT after every section: what a call stopped at
# its limit still brings back)
timeout $((EVAL_DEADLINE_S + 20)) bash bench/eval/run.sh "$@" >/tmp/step-pack/command-$step.log 2>&1
echo "rc=$?" >>/tmp/step-pack/command-$step.log
find "$res" -name '*.log' -size +2M -delete
cp -r "$res" /tmp/step-pack/ev-$step
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv; free -g; nproc; } \
    >/tmp/step-pack/machine-$step.txt 2>&1
dmesg 2>&1 | grep -iE "oom|nvrm|killed process|xid" >/tmp/step-pack/dmesg-$step.txt
{ ls -la /tmp/gs-pressure-disk-* 2>&1; df -h /tmp; } >/tmp/step-pack/disk-images-left-$step.txt
tar czf "$out/step-$step.tar.gz" -C /tmp/step-pack .
tail -20 /tmp/step-pack/command-$step.log
