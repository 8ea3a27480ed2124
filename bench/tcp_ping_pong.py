#!/usr/bin/env python3
"""The socket floor under softrdma's cross-host latency: build/bench/tcp_ping_pong across two
network namespaces joined by a veth pair (root), --runs times, medians of each pattern's
one-way latency and their ratios to one connection read by recv (see tcp_ping_pong.cpp).

Usage: bench/tcp_ping_pong.py [--build build] [--runs 3] [--size 8] [--count 100000]
"""
import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Hosts, pair  # noqa: E402


def floors(build, hosts, runs, size=8, count=100000):
    """Median one-way microseconds of each pattern over `runs` runs, in the tool's order."""
    tool = os.path.join(build, "bench", "tcp_ping_pong")
    samples = {}
    for _ in range(runs):
        out = pair([tool], [tool, "-s", str(size), "-n", str(count), hosts.addr(0)], hosts=hosts)
        for name, us in re.findall(r"^(\w+)\s+([\d.]+)\s", out, re.M):
            samples.setdefault(name, []).append(float(us))
    if not samples:
        raise RuntimeError("tcp_ping_pong printed nothing")
    return {name: statistics.median(values) for name, values in samples.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--count", type=int, default=100000)
    a = ap.parse_args()
    hosts = Hosts(two=True)
    try:
        medians = floors(a.build, hosts, a.runs, a.size, a.count)
    finally:
        hosts.close()
    first = next(iter(medians.values()))
    print("%d-byte TCP ping-pong across two namespaces, one way, medians of %d runs" % (a.size, a.runs))
    print("| pattern | us | ratio |")
    print("|---|---|---|")
    for name, m in medians.items():
        print("| %s | %.2f | %.2fx |" % (name, m, m / first))


if __name__ == "__main__":
    main()
