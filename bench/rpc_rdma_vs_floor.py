#!/usr/bin/env python3
"""rdmakit rpc over rc:// and ud:// against the floor of the same device, in one run.

The device is softrdma (this machine has no RDMA NIC). The floor of a depth-1 call is
perftest's two-sided ping-pong, `ib_send_lat -s 32`, and of a call rate perftest's
`ib_send_bw -s 32` message rate, both on softrdma. perftest and ucx_perftest report a
ping-pong's latency as half the round trip; it is doubled here, since an RPC's latency is the
whole round trip. UCX active messages over the transports a user would pick without RDMA
(shared memory on one host, TCP across hosts) are printed beside them.

One host: server and client are two processes. Two hosts: two network namespaces joined by
veth, created here (needs root). Every contender runs --runs times, interleaved, and the
medians are compared; ratios are to the floor.

Usage: bench/rpc_rdma_vs_floor.py [--build build] [--runs 3] [--seconds 2] [--skip-hosts]
                                  [--charts DIR]   (round_trip.png and rate.png)
"""
import argparse
import os
import re
import statistics
import subprocess

from benchlib import ROOT, Hosts, chart, free_port, perftest, run_json, ucx, wait_listening


class Rpc:
    def __init__(self, build, seconds):
        self.run = os.path.join(build, "softrdma-run")
        self.tool = os.path.join(build, "tools", "rdmakit")
        self.seconds = seconds

    def bench(self, scheme, args, hosts):
        """One rpc-bench client run against a fresh server process; its JSON."""
        port = free_port()
        url = "%s://%s:%d" % (scheme, hosts.addr(0), port)
        server = subprocess.Popen(hosts.on(0) + [self.run, self.tool, "rpc-bench", url, "--serve",
                                                 "-D", "120"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            if not wait_listening(port, pid=server.pid if hosts.two else None):
                raise RuntimeError("rpc-bench did not listen on %s" % url)
            return run_json(hosts.on(1) + [self.run, self.tool, "rpc-bench", url, "--json"] +
                            args.split())
        finally:
            server.kill()
            server.wait()

    def round_trip(self, scheme, hosts, calls):
        return self.bench(scheme, "-t latency -n %d" % calls, hosts)["latency_us"]["median"]

    def rate(self, scheme, hosts, sessions, depth):
        return self.bench(scheme, "-t rate -c %d -q %d -D %s" % (sessions, depth, self.seconds),
                          hosts)["calls_per_second"]


def medians(contenders, runs):
    """Every contender once per round, --runs rounds; the median of each (None if it failed)."""
    values = {label: [] for label, _ in contenders}
    for _ in range(runs):
        for label, thunk in contenders:
            try:
                values[label].append(thunk())
            except Exception as e:  # reported; the others still run
                print("  %s: %s" % (label, str(e)[:300]))
    return {label: statistics.median(v) if v else None for label, v in values.items()}


def show(title, unit, result, floor_label, target=None):
    floor = result.get(floor_label)
    print(title)
    for label, v in result.items():
        if v is None:
            print("    %-28s failed" % label)
            continue
        ratio = " (%.2fx the floor)" % (v / floor) if floor and label != floor_label else ""
        print("    %-28s %10.3f %s%s" % (label, v, unit, ratio))
    if target:
        text, check = target
        verdicts = ["%s %s" % (label, "met" if check(v, floor) else "not met")
                    for label, v in result.items() if label.startswith("rdmakit") and v and floor]
        print("    target %s: %s" % (text, ", ".join(verdicts)))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--skip-hosts", action="store_true", help="only the one-host comparisons")
    ap.add_argument("--charts", help="directory for the charts and their data")
    a = ap.parse_args()
    rpc = Rpc(a.build, a.seconds)
    run = rpc.run

    # Per contender (floor, rc, ud, UCX), the medians of each section, for the charts.
    round_trips, rates = {}, {}

    def contender(label):
        """The row's contender without what differs between sections ("UCX am_lat x2 shm"
        and "UCX am_lat x2 tcp" are both "UCX am_lat"), so one series spans both hosts."""
        name = label.split(" (")[0].replace(" x2", "")
        return re.sub(r" (shm|tcp)$", "", name)

    def remember(into, workload, result, field):
        for label, v in result.items():
            if v is not None:
                into.setdefault(contender(label), []).append({"workload": workload, **field(v)})

    def section(hosts, shm_or_tcp, calls, perftest_iterations):
        where = "two hosts" if hosts.two else "one host"
        lat = medians([
            ("ib_send_lat x2 (floor)", lambda: 2 * perftest(run, "ib_send_lat", [
                "-s", "32", "-n", str(perftest_iterations)], hosts)),
            ("rdmakit rc://", lambda: rpc.round_trip("rc", hosts, calls)),
            ("rdmakit ud://", lambda: rpc.round_trip("ud", hosts, calls)),
            ("UCX am_lat x2 " + shm_or_tcp, lambda: 2 * ucx(
                "ucp_am_lat", 32, "posix,cma,self" if not hosts.two else "tcp", hosts,
                perftest_iterations)),
        ], a.runs)
        if hosts.two:
            target = ("<= 1.2x the floor", lambda v, f: v <= 1.2 * f)
        else:
            target = ("<= floor + 0.5 us", lambda v, f: v <= f + 0.5)
        show("%s, depth 1, 32 B, round trip (us)" % where, "us", lat, "ib_send_lat x2 (floor)",
             target)
        remember(round_trips, where, lat, lambda v: {"latency_us": {"median": v}})
        rate = medians([
            ("ib_send_bw -s 32 (floor)", lambda: 1e6 * perftest(run, "ib_send_bw", [
                "-s", "32", "-n", str(50 * perftest_iterations)], hosts, rate=True)),
            ("rdmakit rc://", lambda: rpc.rate("rc", hosts, 1, 32)),
            ("rdmakit ud://", lambda: rpc.rate("ud", hosts, 1, 32)),
            ("UCX am_bw " + shm_or_tcp, lambda: ucx(
                "ucp_am_bw", 32, "posix,cma,self" if not hosts.two else "tcp", hosts,
                50 * perftest_iterations, rate=True)),
        ], a.runs)
        show("%s, one session at depth 32, 32 B, calls/s (floor: messages/s)" % where, "/s", rate,
             "ib_send_bw -s 32 (floor)", (">= 0.8x the floor", lambda v, f: v >= 0.8 * f))
        remember(rates, where, rate, lambda v: {"calls_per_second": v})

    print("rdmakit rpc on softrdma vs the device's floor; medians of %d interleaved runs" % a.runs)
    section(Hosts(), "shm", 20000, 20000)
    sessions = medians([
        ("rdmakit rc:// 4 sessions", lambda: rpc.rate("rc", Hosts(), 4, 1)),
        ("rdmakit rc:// 16 sessions", lambda: rpc.rate("rc", Hosts(), 16, 1)),
        ("rdmakit ud:// 4 sessions", lambda: rpc.rate("ud", Hosts(), 4, 1)),
        ("rdmakit ud:// 16 sessions", lambda: rpc.rate("ud", Hosts(), 16, 1)),
    ], a.runs)
    print("one host, sessions (a QP each on rc) at depth 1 from one client thread, calls/s")
    for scheme in ("rc", "ud"):
        four, sixteen = (sessions["rdmakit %s:// %d sessions" % (scheme, n)] for n in (4, 16))
        if four and sixteen:
            print("    %s://  4: %.3f M/s  16: %.3f M/s  (16/4 = %.2fx; target >= 1.0x, no "
                  "collapse: %s)" % (scheme, four / 1e6, sixteen / 1e6, sixteen / four,
                                     "met" if sixteen >= four else "not met"))
    if not a.skip_hosts:
        hosts = Hosts(two=True)
        try:
            section(hosts, "tcp", 2000, 2000)
        finally:
            hosts.close()
    if a.charts:
        chart(a.charts, "rpc_round_trip", round_trips, "latency",
              "depth-1 round trip, 32 B (median of %d runs)" % a.runs)
        chart(a.charts, "rpc_rate", rates, "rate",
              "one session at depth 32, 32 B (median of %d runs)" % a.runs)


if __name__ == "__main__":
    main()
