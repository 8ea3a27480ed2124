#!/usr/bin/env python3
"""rdmakit rpc side by side with the peers a user would otherwise pick, in one run, with ratios.

Each row runs rdmakit's `rdmakit rpc-bench` (server on a thread of the same process, as the
peers do) and the peers on the same workload, 32-byte requests and responses unless stated:
ZeroMQ (inproc, ipc, tcp; ROUTER/DEALER), gRPC C++ and Cap'n Proto RPC over TCP loopback, and
this machine's raw floors (a bare ring between threads, the same between processes, a bare
busy-polling TCP echo; bench/peers/floors.cpp). Every program runs --runs times, interleaved,
and medians are compared; the cache-line round trip C of the run is printed, since this VM's
figures move with where its vCPUs sit. Instructions per call (callgrind) are steady where
times are not.

Usage: bench/rpc_vs_peers.py [--build build] [--runs 3] [--seconds 2] [--markdown]
                             [--charts DIR]   (rpc_peers_latency.png, rpc_peers_rate.png)
Peers are built when their packages are installed: scripts/setup-bench.sh.
"""
import argparse
import os
import re
import statistics
import subprocess

from benchlib import ROOT, chart, run_json


LATENCY, RATE = "latency_us.median", "calls_per_second"  # the JSON fields compared


class Bench:
    def __init__(self, args):
        self.args = args
        self.b = os.path.join(ROOT, args.build)
        self.have = {name: os.path.exists(self.path(name)) for name in ("zmq_rpc", "grpc_rpc", "capnp_rpc")}

    def path(self, name):
        return os.path.join(self.b, "bench", name)

    def rdmakit(self, url, test, extra=""):
        argv = [os.path.join(self.b, "tools", "rdmakit"), "rpc-bench", url, "--local", "--json",
                "-t", test, "-D", str(self.args.seconds)] + extra.split()
        return run_json(argv)

    def peer(self, program, where, test, depth=1, size=32):
        argv = [self.path(program), "--where", where, "--test", test, "--depth", str(depth),
                "--size", str(size), "--seconds", str(self.args.seconds)]
        return run_json(argv)

    def median(self, runs, key):
        values = []
        for r in runs:
            v = r
            for k in key.split("."):
                v = v[k]
            values.append(v)
        return statistics.median(values)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--charts", help="directory for the charts and their data")
    args = p.parse_args()
    b = Bench(args)
    uid = os.getpid()

    # Each row: (title, what is measured, [(label, thunk)], key, target text, target check)
    lat, rate = LATENCY, RATE
    rows = []

    def row(title, key, contenders, target=None):
        rows.append((title, key, contenders, target))

    row("calibration: cache-line round trip C", lat,
        [("raw", lambda: b.peer("rpc_floors", "cacheline", "latency"))])
    row("inproc, depth 1, round trip (µs)", lat,
        [("rdmakit", lambda: b.rdmakit("inproc://l%d" % uid, "latency")),
         ("raw SPSC ring", lambda: b.peer("rpc_floors", "spsc", "latency")),
         ("zeromq inproc", lambda: b.peer("zmq_rpc", "inproc", "latency"))],
        ("≤ 0.200 µs", lambda v: v <= 0.2))
    row("inproc, depth 32, calls/s", rate,
        [("rdmakit", lambda: b.rdmakit("inproc://r%d" % uid, "rate", "-q 32")),
         ("raw SPSC ring", lambda: b.peer("rpc_floors", "spsc", "rate", 32)),
         ("zeromq inproc", lambda: b.peer("zmq_rpc", "inproc", "rate", 32))],
        ("≥ 40 M/s", lambda v: v >= 40e6))
    row("shm, depth 1, round trip (µs)", lat,
        [("rdmakit", lambda: b.rdmakit("shm://l%d" % uid, "latency")),
         ("raw shm ring", lambda: b.peer("rpc_floors", "shm", "latency")),
         ("zeromq ipc", lambda: b.peer("zmq_rpc", "ipc", "latency"))],
        ("≤ 0.300 µs", lambda v: v <= 0.3))
    row("shm, depth 8, calls/s", rate,
        [("rdmakit", lambda: b.rdmakit("shm://r%d" % uid, "rate", "-q 8")),
         ("raw shm ring", lambda: b.peer("rpc_floors", "shm", "rate", 8)),
         ("zeromq ipc", lambda: b.peer("zmq_rpc", "ipc", "rate", 8))],
        ("≥ 20 M/s", lambda v: v >= 20e6))
    row("shm, depth 32, calls/s", rate,
        [("rdmakit", lambda: b.rdmakit("shm://s%d" % uid, "rate", "-q 32")),
         ("raw shm ring", lambda: b.peer("rpc_floors", "shm", "rate", 32)),
         ("zeromq ipc", lambda: b.peer("zmq_rpc", "ipc", "rate", 32))])
    row("tcp, depth 1, round trip (µs), busy-polling", lat,
        [("rdmakit", lambda: b.rdmakit("tcp://127.0.0.1:0", "latency")),
         ("raw TCP echo", lambda: b.peer("rpc_floors", "tcp", "latency")),
         ("zeromq tcp", lambda: b.peer("zmq_rpc", "tcp", "latency")),
         ("grpc", lambda: b.peer("grpc_rpc", "tcp", "latency")),
         ("capnproto", lambda: b.peer("capnp_rpc", "tcp", "latency"))],
        ("≤ 20 µs, ≤ 0.5× zeromq", lambda v: v <= 20))
    row("tcp, depth 1, round trip (µs), blocking", lat,
        [("rdmakit", lambda: b.rdmakit("tcp://127.0.0.1:0", "latency", "--mode blocking")),
         ("zeromq tcp", lambda: b.peer("zmq_rpc", "tcp", "latency"))],
        ("≤ 60 µs", lambda v: v <= 60))
    row("tcp, depth 32, one connection, calls/s", rate,
        [("rdmakit", lambda: b.rdmakit("tcp://127.0.0.1:0", "rate", "-q 32")),
         ("raw TCP echo", lambda: b.peer("rpc_floors", "tcp", "rate", 32)),
         ("zeromq tcp", lambda: b.peer("zmq_rpc", "tcp", "rate", 32)),
         ("grpc", lambda: b.peer("grpc_rpc", "tcp", "rate", 32)),
         ("capnproto", lambda: b.peer("capnp_rpc", "tcp", "rate", 32))],
        ("≥ 1.5 M/s, ≥ 2× zeromq, ≥ 50× grpc", lambda v: v >= 1.5e6))
    for clients in (1, 2, 4, 8, 16):
        row("shm, %d client%s x depth 1, calls/s" % (clients, "s" if clients > 1 else ""), rate,
            [("rdmakit", lambda c=clients: b.rdmakit("shm://c%d-%d" % (uid, c), "rate", "-c %d -q 1" % c))],
            ("non-decreasing in clients", None))
    row("shm, 1 MiB requests (8 B replies), depth 4, MB/s", "mb_per_second",
        [("rdmakit", lambda: b.rdmakit("shm://bw%d" % uid, "bandwidth", "-s 1048576 -q 4"))],
        ("≥ 10000 MB/s", lambda v: v >= 10000))
    row("tcp, 1 MiB requests (8 B replies), depth 4, MB/s", "mb_per_second",
        [("rdmakit", lambda: b.rdmakit("tcp://127.0.0.1:0", "bandwidth", "-s 1048576 -q 4"))])

    results = []
    for title, key, contenders, target in rows:
        runs = {label: [] for label, _ in contenders}
        for _ in range(args.runs):  # interleaved: every contender once per round
            for label, thunk in contenders:
                program = label.split()[0]
                if program in ("zeromq", "grpc", "capnproto") and not b.have[
                        {"zeromq": "zmq_rpc", "grpc": "grpc_rpc", "capnproto": "capnp_rpc"}[program]]:
                    continue
                try:
                    runs[label].append(thunk())
                except Exception as e:  # a peer that fails is reported, the others still run
                    print("  %s: %s" % (label, e))
        medians = {l: b.median(r, key) for l, r in runs.items() if r}
        results.append((title, key, medians, target))
        print_row(title, key, medians, target, args.markdown)

    scaling = [m.get("rdmakit") for t, k, m, _ in results if "x depth 1" in t]
    if all(scaling):
        ok = all(b2 >= b1 * 0.95 for b1, b2 in zip(scaling, scaling[1:]))
        print("shm clients 1→16 at depth 1: %s (%s)" %
              (" → ".join("%.2fM" % (s / 1e6) for s in scaling), "non-decreasing" if ok else "DECREASES"))
    instructions(b)
    if args.charts:
        draw_charts(args, results)


def draw_charts(args, results):
    """One latency and one rate chart: a bar group per row, a series per kind of contender
    (the raw floors of all transports are one series, as are ZeroMQ's three transports)."""
    series = {LATENCY: {}, RATE: {}}
    for title, key, medians, _ in results:
        if key not in series or title.startswith("calibration"):
            continue
        workload = re.sub(r", (round trip \(µs\)|calls/s)", "", title)
        for label, v in medians.items():
            contender = "raw floor" if label.startswith("raw") else label.split()[0]
            point = {"latency_us": {"median": v}} if key == LATENCY else {RATE: v}
            series[key].setdefault(contender, []).append({"workload": workload, **point})
    chart(args.charts, "rpc_peers_latency", series[LATENCY], "latency",
          "round trip, 32 B (median of %d runs)" % args.runs)
    chart(args.charts, "rpc_peers_rate", series[RATE], "rate",
          "calls per second, 32 B (median of %d runs)" % args.runs)


def fmt(key, v):
    if key == "calls_per_second":
        return "%.3f M/s" % (v / 1e6)
    if key == "mb_per_second":
        return "%.0f MB/s" % v
    return "%.3f µs" % v


def print_row(title, key, medians, target, markdown):
    ours = medians.get("rdmakit") or medians.get("raw")
    cells = []
    for label, v in medians.items():
        text = "%s %s" % (label, fmt(key, v))
        if label != "rdmakit" and "rdmakit" in medians and v:
            ratio = medians["rdmakit"] / v
            text += " (rdmakit %.3g×)" % ratio
        cells.append(text)
    verdict = ""
    if target and "rdmakit" in medians:
        text, check = target
        verdict = "target %s: %s" % (text, "met" if check is None or check(ours) else "not met") \
            if check else "target %s" % text
    if markdown:
        print("| %s | %s | %s |" % (title, " · ".join(cells), verdict))
    else:
        print("%s\n    %s\n    %s" % (title, "\n    ".join(cells), verdict))


def instructions(b):
    """Instructions per call, client and server together (callgrind; steady on this VM)."""
    program = b.path("rpc_call_cost")
    for url in ("inproc://cost", "shm://cost-%d" % os.getpid(), "tcp://127.0.0.1:0"):
        totals = []
        for calls in (5000, 10000):
            out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                                  program, url, str(calls), "32"], capture_output=True, text=True)
            m = re.search(r"Collected : (\d+)", out.stderr)
            totals.append(int(m.group(1)) if m else None)
        if None not in totals:
            print("instructions per call (callgrind, depth 32, client + server), %s: %d" %
                  (url.split(":")[0], (totals[1] - totals[0]) / 5000))


if __name__ == "__main__":
    main()
