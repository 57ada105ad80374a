#!/usr/bin/python3
"""bench/eval/merge_steps.py - one results folder from the tarballs of
bench/eval/device_steps.sh, for bench/eval/report.py:

    /usr/bin/python3 bench/eval/merge_steps.py DEST step-1.tar.gz step-2.tar.gz step-3.tar.gz

DEST/run/ gets every step's results (its ev-N folder) merged: one
machine.txt (the first step's), eval.log concatenated, any other name two
steps share kept as NAME-stepN; DEST/ gets each step's command-N.log,
machine-N.txt, dmesg-N.txt and disk-images-left-N.txt (report.py refuses
machine-*.txt inside the results folder, so they stay outside it).
Refuses, naming them, steps that ran on another GPU or at another commit:
the evaluation is one run of one commit on one machine (issue 38)."""
import os
import shutil
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import read_machine  # noqa: E402  (machine.txt as report.py reads it)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    dest, tars = argv[1], argv[2:]
    run = os.path.join(dest, "run")
    os.makedirs(run, exist_ok=True)
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        for i, tar in enumerate(tars, 1):
            top = os.path.join(tmp, "s%d" % i)
            with tarfile.open(tar) as t:
                for member in t.getmembers():  # (Debian 12's tarfile has no filter=)
                    if member.name.startswith("/") or ".." in member.name.split("/") or not (
                            member.isfile() or member.isdir()):
                        sys.exit("merge_steps.py: %s: refusing %r" % (tar, member.name))
                t.extractall(top)
            evs = [d for d in os.listdir(top) if d.startswith("ev-")]
            if len(evs) != 1:
                sys.exit("merge_steps.py: %s: expected one ev-N folder, found %s" % (tar, evs))
            step = evs[0][3:]
            ev = os.path.join(top, evs[0])
            m = read_machine(ev)
            key = (m.get("gpu"), m.get("gpushare"))
            if first is None:
                first = key
                shutil.copy(os.path.join(ev, "machine.txt"), os.path.join(run, "machine.txt"))
            elif key != first:
                sys.exit("merge_steps.py: %s ran on %s at %s, the first step on %s at %s: one "
                         "run of one commit on one machine" % (tar, key[0], key[1], first[0],
                                                               first[1]))
            for name in os.listdir(top):
                if name != evs[0]:
                    shutil.copy(os.path.join(top, name), os.path.join(dest, name))
            for name in os.listdir(ev):
                src, dst = os.path.join(ev, name), os.path.join(run, name)
                if name == "machine.txt":
                    continue
                if name == "eval.log" and os.path.exists(dst):
                    with open(dst, "a") as out, open(src) as f:
                        out.write(f.read())
                    continue
                if os.path.exists(dst):
                    root, ext = os.path.splitext(name)
                    dst = os.path.join(run, "%s-step%s%s" % (root, step, ext))
                if os.path.isdir(src):
                    shutil.copytree(src, dst)
                else:
                    shutil.copy(src, dst)
    print("merged %d steps into %s (gpu %s, gpushare %s)" % (len(tars), run, first[0], first[1]))


if __name__ == "__main__":
    main(sys.argv)
