#!/usr/bin/env python3
"""Two-way streaming of RDMA-like requests and answers over TCP, on one connection against
two, and against one way: build/bench/tcp_two_way across two network namespaces joined by a
veth pair (root), --runs times; medians per pattern of the MiB/s each way (see
tcp_two_way.cpp).

Usage: bench/tcp_two_way.py [--build build] [--runs 3] [--size 65536] [--window 128]
                            [--count 20000] [--lowat 131072]
"""
import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Hosts, pair  # noqa: E402


def measure(build, hosts, runs, size, window, count, lowat):
    """{pattern: MiB/s each way}, medians over runs and sides."""
    tool = os.path.join(build, "bench", "tcp_two_way")
    samples = {}
    for _ in range(runs):
        out = pair([tool], [tool, "-s", str(size), "-w", str(window), "-n", str(count),
                            "-l", str(lowat), hosts.addr(0)], hosts=hosts)
        for name, mib in re.findall(r"^(\w+)\s+(?:client|server)\s+([\d.]+)$", out, re.M):
            samples.setdefault(name, []).append(float(mib))
    if "two" not in samples or "oneway" not in samples:
        raise RuntimeError("tcp_two_way printed no result")
    return {name: statistics.median(values) for name, values in samples.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--lowat", type=int, default=128 << 10)
    a = ap.parse_args()
    hosts = Hosts(two=True)
    try:
        medians = measure(a.build, hosts, a.runs, a.size, a.window, a.count, a.lowat)
    finally:
        hosts.close()
    print("%d-byte requests across two namespaces, %d unanswered at most; medians of %d runs "
          "and both sides" % (a.size, a.window, a.runs))
    print("| pattern | MiB/s each way | vs one way | vs two connections |")
    print("|---|---|---|---|")
    for name, mib in medians.items():
        print("| %s | %.0f | %.2fx | %.2fx |" % (name, mib, mib / medians["oneway"], mib / medians["two"]))


if __name__ == "__main__":
    main()
