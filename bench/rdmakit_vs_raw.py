#!/usr/bin/env python3
"""rdmakit's data paths against raw verbs, on softrdma, side by side in one run.

8-byte RDMA WRITEs at queue depths 1, 16 and 128, measured by build/bench/rdmakit_datapath
in three modes -- a raw-verbs loop, rdmakit's poll path (PollQueuePair) and its coroutine
path (AsyncQueuePair) -- interleaved, --runs times each, medians compared as ratios to raw.
Unmodified perftest (ib_write_bw -s 8 -t <depth>) runs beside them as the outside reference.
Then callgrind counts instructions per operation for each mode and depth (the difference
between two runs of different lengths, so set-up cancels out), independent of machine noise.

Usage: bench/rdmakit_vs_raw.py [--build build] [--runs 5] [--ops 300000] [--no-callgrind]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, perftest  # noqa: E402

MODES = ["raw", "poll", "coroutine"]
DEPTHS = [1, 16, 128]


def env_for(build):
    return dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "softrdma", "lib"))


def datapath(build, mode, depth, ops, prefix=(), extra_env=None, op="write"):
    env = env_for(build)
    env.update(extra_env or {})
    cmd = list(prefix) + [os.path.join(build, "bench", "rdmakit_datapath"), "--mode", mode,
                          "--depth", str(depth), "--ops", str(ops), "--op", op]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("%s failed: %s" % (cmd, out.stderr[-500:]))
    return out


def mops(build, mode, depth, ops):
    line = datapath(build, mode, depth, ops).stdout.strip().splitlines()[-1]
    return json.loads(line)["mops"]


def perftest_mpps(build, depth, ops):
    args = ["-s", "8", "-t", str(depth), "-n", str(ops)]
    return perftest(os.path.join(build, "softrdma-run"), "ib_write_bw", args, rate=True)


def instructions_per_op(build, mode, depth, op="write"):
    """Ir of a long run minus Ir of a short one, per extra operation."""
    counts = []
    for ops in (4000, 8000):
        err = datapath(build, mode, depth, ops,
                       prefix=["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"],
                       extra_env={"SOFTRDMA_ARENA_GIB": "4"}, op=op).stderr
        counts.append(int(re.search(r"Collected : (\d+)", err).group(1)))
    return (counts[1] - counts[0]) / 4000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ops", type=int, default=300000)
    ap.add_argument("--no-callgrind", action="store_true")
    args = ap.parse_args()

    print("8-byte RDMA WRITE on softrdma (one host), Mops/s, median of %d runs" % args.runs)
    print("| depth | raw verbs | rdmakit poll | ratio | rdmakit coroutine | ratio | perftest ib_write_bw |")
    print("|---|---|---|---|---|---|---|")
    for depth in DEPTHS:
        samples = {m: [] for m in MODES + ["perftest"]}
        for _ in range(args.runs):  # interleaved, so drift hits every mode alike
            for m in MODES:
                samples[m].append(mops(args.build, m, depth, args.ops))
            samples["perftest"].append(perftest_mpps(args.build, depth, args.ops))
        med = {m: statistics.median(v) for m, v in samples.items()}
        print("| %d | %.3f | %.3f | %.2fx | %.3f | %.2fx | %.3f |" % (
            depth, med["raw"], med["poll"], med["poll"] / med["raw"], med["coroutine"],
            med["coroutine"] / med["raw"], med["perftest"]), flush=True)
    if args.no_callgrind:
        return
    print()
    print("Instructions per operation (callgrind; includes softrdma's own work)")
    print("| depth | raw verbs | rdmakit poll | extra | rdmakit coroutine | extra |")
    print("|---|---|---|---|---|---|")
    for depth in DEPTHS:
        ir = {m: instructions_per_op(args.build, m, depth) for m in MODES}
        print("| %d | %.0f | %.0f | %+.0f | %.0f | %+.0f |" % (
            depth, ir["raw"], ir["poll"], ir["poll"] - ir["raw"], ir["coroutine"],
            ir["coroutine"] - ir["raw"]), flush=True)


if __name__ == "__main__":
    main()
