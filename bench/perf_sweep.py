#!/usr/bin/env python3
"""Charts of softrdma against message size, beside UCX over shared memory, on one host.

`rdmakit perf write_bw -a` and `write_lat -a` (every size from 2 B to 8 MiB) on softrdma,
and ucx_perftest's ucp_put_bw / ucp_put_lat (UCX_TLS=posix,cma) at every fourth size; the
JSON lines go to DIR/*.json and tools/rdmakit-plot draws DIR/write_bw.png and
DIR/write_lat.png (both sides' latency is half a round trip, as perftest reports it).

Usage: bench/perf_sweep.py [--build build] [--charts docs/img] [--iterations 2000]
"""
import argparse
import json
import os
import subprocess

from benchlib import ROOT, pair, ucx

UCX_SIZES = [2 ** k for k in range(1, 24, 4)]  # 2 B, 32 B, 512 B, 8 KiB, 128 KiB, 2 MiB


def rdmakit_perf(build, test, iterations):
    run = os.path.join(build, "softrdma-run")
    tool = [run, os.path.join(build, "tools", "rdmakit"), "perf", test, "-a", "-n",
            str(iterations)]
    out = pair(tool, tool + ["--json", "127.0.0.1"])
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def ucx_sweep(test, iterations):
    points = []
    for size in UCX_SIZES:
        value = ucx(test, size, "posix,cma", iterations=iterations)
        if test.endswith("_bw"):  # MB/s -> MiB/s, perf's unit
            points.append({"size": size, "bw_avg_mib": value * 1e6 / 2 ** 20})
        else:  # ucx_perftest's median, drawn as the typical latency (no percentiles)
            points.append({"size": size, "t_typical": value})
    return points


def save(path, objects):
    with open(path, "w") as f:
        for o in objects:
            f.write(json.dumps(o) + "\n")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--charts", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--iterations", type=int, default=2000)
    a = ap.parse_args()
    os.makedirs(a.charts, exist_ok=True)
    plot = ["/usr/bin/python3", os.path.join(ROOT, "tools", "rdmakit-plot")]
    for test, ucx_test, title in (
            ("write_bw", "ucp_put_bw", "RDMA WRITE bandwidth, one host"),
            ("write_lat", "ucp_put_lat", "RDMA WRITE latency (half round trip), one host")):
        ours = save(os.path.join(a.charts, "%s-softrdma.json" % test),
                    rdmakit_perf(a.build, test, a.iterations))
        theirs = save(os.path.join(a.charts, "%s-ucx.json" % test),
                      ucx_sweep(ucx_test, a.iterations))
        chart = os.path.join(a.charts, "%s.png" % test)
        subprocess.run(plot + [ours + ":softrdma (rdmakit perf)", theirs + ":UCX shm (%s)" % ucx_test,
                               "-o", chart, "--title", title], check=True)
        print("wrote", chart)


if __name__ == "__main__":
    main()
