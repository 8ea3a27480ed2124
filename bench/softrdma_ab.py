#!/usr/bin/env python3
"""Two builds of softrdma side by side: the same perftest runs against each library,
interleaved (A, B, A, B, ...) so that the machine's slow and fast phases fall on both, and
their medians compared as ratios to the first.

A library is a directory holding libibverbs.so.1, librdmacm.so.1 and softrdma-view, as
build/softrdma/lib does; copy it aside before rebuilding to keep the old one (or build an
older commit in a worktree). Tests run across two network namespaces joined by a veth pair
(root), or on this host with --one-host.

Usage: bench/softrdma_ab.py LIB_DIR LIB_DIR... [--tests write_bw,send_lat] [--runs 3]
                            [--one-host] [--build build]
Tests: %s
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Hosts, perftest  # noqa: E402

# name: (perftest tool, its arguments, divisor of its figure: 2 turns a two-way total into
# the rate in each direction)
TESTS = {
    "write_bw": ("ib_write_bw", ["-s", "65536", "-n", "5000"], 1),
    "write_bw_1MiB": ("ib_write_bw", ["-s", "1048576", "-n", "1500"], 1),
    "send_bw_1MiB": ("ib_send_bw", ["-s", "1048576", "-n", "1500"], 1),
    "write_bw_both_ways": ("ib_write_bw", ["-s", "65536", "-n", "5000", "-b"], 2),
    "send_bw": ("ib_send_bw", ["-s", "65536", "-n", "5000"], 1),
    "send_bw_both_ways": ("ib_send_bw", ["-s", "65536", "-n", "5000", "-b"], 2),
    "write_lat": ("ib_write_lat", ["-s", "8", "-n", "5000"], 1),
    "send_lat": ("ib_send_lat", ["-s", "8", "-n", "5000"], 1),
    "write_lat_64KiB": ("ib_write_lat", ["-s", "65536", "-n", "3000"], 1),
    "send_lat_64KiB": ("ib_send_lat", ["-s", "65536", "-n", "3000"], 1),
    "send_lat_ud": ("ib_send_lat", ["-c", "UD", "-s", "8", "-n", "5000"], 1),
    "read_lat": ("ib_read_lat", ["-s", "8", "-n", "5000"], 1),
    "read_bw": ("ib_read_bw", ["-s", "65536", "-n", "5000"], 1),
    # 8-byte streams: what each request costs the library, where the bytes cost nothing
    "write_bw_8B": ("ib_write_bw", ["-s", "8", "-n", "200000"], 1),
    "send_bw_8B": ("ib_send_bw", ["-s", "8", "-n", "200000"], 1),
    "atomic_lat": ("ib_atomic_lat", ["-n", "5000"], 1),
}
__doc__ %= ", ".join(TESTS)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("libs", nargs="+", help="library directories; the first is the reference")
    ap.add_argument("--tests", default="write_bw,write_bw_both_ways,send_lat,write_lat")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--one-host", action="store_true")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    tests = a.tests.split(",")
    unknown = [t for t in tests if t not in TESTS]
    if unknown:
        ap.error("unknown tests: %s (known: %s)" % (", ".join(unknown), ", ".join(TESTS)))
    for lib in a.libs:
        if not os.path.exists(os.path.join(lib, "libibverbs.so.1")):
            ap.error("%s holds no libibverbs.so.1" % lib)
    run = os.path.join(a.build, "softrdma-run")
    hosts = Hosts(two=not a.one_host)
    results = {(lib, t): [] for lib in a.libs for t in tests}
    try:
        for _ in range(a.runs):
            for t in tests:
                tool, args, divisor = TESTS[t]
                for lib in a.libs:
                    os.environ["SOFTRDMA_LIB_DIR"] = os.path.abspath(lib)  # read by softrdma-run
                    results[(lib, t)].append(perftest(run, tool, args, hosts) / divisor)
    finally:
        hosts.close()
    print("%s, medians of %d interleaved runs (MiB/s each way for bandwidth, us for latency)"
          % ("one host" if a.one_host else "two hosts (namespaces + veth)", a.runs))
    for t in tests:
        reference = statistics.median(results[(a.libs[0], t)])
        cells = []
        for lib in a.libs:
            m = statistics.median(results[(lib, t)])
            cells.append("%s %.2f (%.2fx)" % (lib, m, m / reference))
        print("%-20s %s" % (t, "   ".join(cells)))


if __name__ == "__main__":
    main()
