#!/usr/bin/env python3
"""softrdma under unmodified perftest, side by side with its peers in one run, with ratios.

Same host: perftest on softrdma against ucx_perftest over shared memory (UCX_TLS=posix,cma),
the peer a user would otherwise pick on a machine without an RDMA NIC.
Across hosts (two network namespaces joined by veth, created here; needs root): perftest
on softrdma's TCP transport against one iperf3 stream and ucx_perftest over TCP, with the
socket's own floor under the latencies (bench/tcp_ping_pong).
Each pair runs --runs times, interleaved, and the medians are compared; two-way streams
(`-b`) are compared, per direction, with one way alone, and beside them how busy the two
CPUs are under one long stream one way and both ways, softrdma's and iperf3's. Also: the CPU the
serving process used per GiB written across hosts, RDMA CM connection set-up rate (100
connections) beside plain TCP's and what creating and destroying a connection's CQs and QP
costs (bench/verbs_setup_cost), the CPU used by a process holding 100 connected idle QPs,
and callgrind's instructions per 8-byte WRITE, READ and fetch-and-add on one host (raw
verbs, depth 1, including ibv_post_send and ibv_poll_cq), a figure free of machine noise.

Usage: bench/perftest_vs_peers.py [--build build] [--runs 5] [--skip-hosts]
                                  [--charts DIR]   (perftest_latency.png, perftest_bandwidth.png)
"""
import argparse
import json
import os
import re
import statistics
import subprocess

from benchlib import ROOT, Hosts, chart, cpus_busy_during, pair, perftest, ucx
from rdmakit_vs_raw import instructions_per_op
from tcp_ping_pong import floors


def iperf3(hosts, both_ways=False):
    """One TCP stream between the hosts, in MiB/s (the unit perftest reports); with
    `both_ways`, one stream each way at once (--bidir), and the mean of the two."""
    out = pair(["iperf3", "-s", "-1"],
               ["iperf3", "-c", hosts.addr(0), "-t", "3", "-J"] + (["--bidir"] if both_ways else []),
               hosts=hosts)
    end = json.loads(out)["end"]
    bits = end["sum_received"]["bits_per_second"]
    if both_ways:
        bits = (bits + end["sum_received_bidir_reverse"]["bits_per_second"]) / 2
    return bits / 8 / 2**20


def connect_rate(build):
    """RDMA CM connections per second (100, one after the other) and plain TCP's."""
    exe = os.path.join(build, "bench", "cm_connect_rate")
    out = subprocess.run([os.path.join(build, "softrdma-run"), exe, "100"],
                         capture_output=True, text=True, timeout=120).stdout
    m = re.search(r"rdma_cm_per_s=(\d+) tcp_per_s=(\d+)", out)
    if not m:
        raise RuntimeError("no result from cm_connect_rate: " + out)
    return float(m.group(1)), float(m.group(2))


def setup_costs(build):
    """Microseconds per ibv_create_cq, ibv_create_qp and their destroys (1000 of each kept)."""
    out = subprocess.run([os.path.join(build, "softrdma-run"),
                          os.path.join(build, "bench", "verbs_setup_cost"), "1000"],
                         capture_output=True, text=True, timeout=120).stdout
    return {k: float(v) for k, v in re.findall(r"(\w+_us)=([\d.]+)", out)}


def idle_cpu_seconds(build):
    exe = os.path.join(build, "bench", "idle_qps")
    if not os.path.exists(exe):
        return None
    out = subprocess.run([os.path.join(build, "softrdma-run"), exe, "100", "3"],
                         capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"cpu_seconds=([\d.]+)", out)
    return float(m.group(1)) if m else None


def compare(cases, runs, peer_name, where, into):
    """Prints each case's medians and ratio, and adds them to `into` ({"latency" or "bandwidth":
    {contender: [points]}}) as points of the workload "LABEL, WHERE" for the charts."""
    print("%-26s %12s %12s %8s %10s" % ("test", "softrdma", peer_name, "ratio", "target"))
    for label, ours, theirs, higher, target in cases:
        o, t = [], []
        for _ in range(runs):
            o.append(ours())
            t.append(theirs())
        mo, mt = statistics.median(o), statistics.median(t)
        ratio = mo / mt
        met = ratio >= target if higher else ratio <= target
        print("%-26s %12.3f %12.3f %7.2fx %5s%.1fx %s" % (label, mo, mt, ratio,
                                                         ">=" if higher else "<=", target,
                                                         "met" if met else "not met"))
        unit = re.search(r" \(([^)]*)\)$", label).group(1)
        if unit not in ("us", "MiB/s"):
            continue  # the charts show latency and bandwidth
        workload = "%s, %s" % (label[:-len(unit) - 3], where)
        for contender, value in (("softrdma", mo), (peer_name, mt)):
            point = {"workload": workload}
            if higher:
                into["bandwidth"].setdefault(contender, []).append({**point, "bw_avg_mib": value})
            else:
                into["latency"].setdefault(contender, []).append(
                    {**point, "latency_us": {"median": value}})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-hosts", action="store_true", help="only the same-host comparisons")
    ap.add_argument("--charts", help="directory for the charts and their data")
    a = ap.parse_args()
    run = os.path.join(a.build, "softrdma-run")
    shm = "posix,cma"
    mpps = lambda per_s: per_s / 1e6  # noqa: E731
    cases = [
        # (label, softrdma measurement, UCX measurement, higher is better, target ratio)
        ("write bw 64 KiB (MiB/s)", lambda: perftest(run, "ib_write_bw", ["-s", "65536", "-n", "20000"]),
         lambda: ucx("ucp_put_bw", 65536, shm), True, 1.0),
        ("read bw 64 KiB (MiB/s)", lambda: perftest(run, "ib_read_bw", ["-s", "65536", "-n", "20000"]),
         lambda: ucx("ucp_get", 65536, shm, bandwidth=True), True, 1.0),
        ("send bw 64 KiB (MiB/s)", lambda: perftest(run, "ib_send_bw", ["-s", "65536", "-n", "20000"]),
         lambda: ucx("tag_bw", 65536, shm), True, 1.0),
        ("write rate 8 B (Mpps)",
         lambda: perftest(run, "ib_write_bw", ["-s", "8", "-n", "200000"], rate=True),
         lambda: mpps(ucx("ucp_put_bw", 8, shm, iterations=200000, rate=True)), True, 0.5),
        ("send rate 8 B (Mpps)",
         lambda: perftest(run, "ib_send_bw", ["-s", "8", "-n", "200000"], rate=True),
         lambda: mpps(ucx("ucp_put_bw", 8, shm, iterations=200000, rate=True)), True, 0.5),
        # The target compares SENDs with UCX's one-sided puts; this row compares them
        # with UCX's own two-sided messages, each matched to a receive (our bar, not the issue's).
        ("send 8 B vs tag_bw (Mpps)",
         lambda: perftest(run, "ib_send_bw", ["-s", "8", "-n", "200000"], rate=True),
         lambda: mpps(ucx("tag_bw", 8, shm, iterations=200000, rate=True)), True, 1.0),
        ("write lat 8 B (us)", lambda: perftest(run, "ib_write_lat", ["-s", "8", "-n", "20000"]),
         lambda: ucx("ucp_put_lat", 8, shm), False, 1.5),
        ("read lat 8 B (us)", lambda: perftest(run, "ib_read_lat", ["-s", "8", "-n", "20000"]),
         lambda: ucx("ucp_get", 8, shm), False, 1.5),
        ("atomic lat 8 B (us)", lambda: perftest(run, "ib_atomic_lat", ["-n", "20000"]),
         lambda: ucx("ucp_fadd", 8, shm), False, 1.5),
        ("send lat 8 B (us)", lambda: perftest(run, "ib_send_lat", ["-s", "8", "-n", "20000"]),
         lambda: ucx("tag_lat", 8, shm), False, 1.5),
        # The same over connections made by the RDMA CM (perftest -R).
        ("write bw 64 KiB -R (MiB/s)",
         lambda: perftest(run, "ib_write_bw", ["-s", "65536", "-n", "20000", "-R"]),
         lambda: ucx("ucp_put_bw", 65536, shm), True, 1.0),
        ("write lat 8 B -R (us)", lambda: perftest(run, "ib_write_lat", ["-s", "8", "-n", "20000", "-R"]),
         lambda: ucx("ucp_put_lat", 8, shm), False, 1.5),
    ]
    print("same host, medians of %d interleaved runs; peer = UCX over shared memory" % a.runs)
    medians = {"latency": {}, "bandwidth": {}}
    compare(cases, a.runs, "UCX shm", "one host", medians)
    if not a.skip_hosts:
        hosts = Hosts(two=True)
        cpu_per_gib = []

        def write_bw(size, iterations):
            """ib_write_bw across the hosts; notes the serving side's CPU per GiB written."""
            bw, cpu = perftest(run, "ib_write_bw", ["-s", str(size), "-n", str(iterations)], hosts,
                               server_cpu=True)
            cpu_per_gib.append(cpu / (size * iterations / 2**30))
            return bw

        try:
            tcp_tls = "tcp"
            streams = [
                ("write bw 64 KiB (MiB/s)", lambda: write_bw(65536, 5000), lambda: iperf3(hosts),
                 True, 0.9),
                ("write bw 1 MiB (MiB/s)", lambda: write_bw(2**20, 400), lambda: iperf3(hosts),
                 True, 0.9),
            ]
            latencies = [
                ("write lat 8 B (us)",
                 lambda: perftest(run, "ib_write_lat", ["-s", "8", "-n", "5000"], hosts),
                 lambda: ucx("ucp_put_lat", 8, tcp_tls, hosts, 5000), False, 1.5),
                ("send lat 8 B (us)",
                 lambda: perftest(run, "ib_send_lat", ["-s", "8", "-n", "5000"], hosts),
                 lambda: ucx("tag_lat", 8, tcp_tls, hosts, 5000), False, 1.0),
                ("read lat 8 B (us)",
                 lambda: perftest(run, "ib_read_lat", ["-s", "8", "-n", "5000"], hosts),
                 lambda: ucx("ucp_get", 8, tcp_tls, hosts, 5000), False, 1.0),
            ]
            print()
            print("two hosts (namespaces + veth), medians of %d; peers = one iperf3 stream (bw), "
                  "UCX over TCP (lat)" % a.runs)
            compare(streams, a.runs, "iperf3", "two hosts", medians)
            print("the serving side's CPU per GiB written (ib_write_bw server, all its threads): "
                  "median %.2f s" % statistics.median(cpu_per_gib))
            compare(latencies, a.runs, "UCX tcp", "two hosts", medians)
            floor = floors(a.build, hosts, a.runs)
            print("the socket's floor (bench/tcp_ping_pong, 8 B, one way): %.2f us over one "
                  "connection read by recv, %.2f us with epoll_wait first, %.2f us with requests "
                  "and answers on two connections, as softrdma's link and inbound connection "
                  "carry them, %.2f us on two connections each read by a peek and emptied after "
                  "the answer, as softrdma's polls read them"
                  % (floor["one"], floor["epoll"], floor["two"], floor["peek"]))

            def each_way(tool, bidirectional):
                """64 KiB streams; with `bidirectional` both hosts send at once, and perftest's
                total is halved: the rate in each direction."""
                args = ["-s", "65536", "-n", "5000"] + (["-b"] if bidirectional else [])
                bw = perftest(run, tool, args, hosts)
                return bw / 2 if bidirectional else bw

            both_ways = [
                ("%s 64 KiB (MiB/s each way)" % tool.replace("ib_", "").replace("_", " "),
                 lambda tool=tool: each_way(tool, True), lambda tool=tool: each_way(tool, False),
                 True, 0.8) for tool in ("ib_write_bw", "ib_send_bw")]
            print("both hosts sending at once, each direction against one way alone")
            compare(both_ways, a.runs, "one way", "two hosts", medians)
            # The same measure for plain TCP: on a machine of few cores both directions share
            # them, and this is what the sockets themselves keep of one way.
            tcp_each = [(iperf3(hosts, True), iperf3(hosts)) for _ in range(a.runs)]
            each, one = (statistics.median(x[i] for x in tcp_each) for i in (0, 1))
            print("for reference, iperf3 --bidir: %.0f MiB/s each way against %.0f one way "
                  "(%.2fx), medians of %d" % (each, one, each / one, a.runs))
            # What the streams leave of the two CPUs: a one-way stream that already keeps
            # them busy leaves little for the second direction.
            # (perftest runs 4 s after its set-up, iperf3 3 s: the window lies within both.)
            busy = [cpus_busy_during(f, start=1.5, window=1.5) for f in (
                lambda: perftest(run, "ib_write_bw", ["-s", "65536", "-D", "4"], hosts),
                lambda: perftest(run, "ib_write_bw", ["-s", "65536", "-D", "4", "-b"], hosts),
                lambda: iperf3(hosts), lambda: iperf3(hosts, True))]
            print("CPUs busy, one long run each: ib_write_bw one way %.0f MiB/s, %.0f%%; both "
                  "ways %.0f MiB/s each way, %.0f%%; iperf3 one way %.0f MiB/s, %.0f%%; --bidir "
                  "%.0f MiB/s each way, %.0f%%" %
                  (busy[0][0], 100 * busy[0][1], busy[1][0] / 2, 100 * busy[1][1],
                   busy[2][0], 100 * busy[2][1], busy[3][0], 100 * busy[3][1]))
        finally:
            hosts.close()
    print()
    rates = [connect_rate(a.build) for _ in range(a.runs)]
    cm, tcp = statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)
    print("connection set-up, 100 connections one after the other, medians of %d: "
          "RDMA CM %.0f/s, plain TCP connect+exchange %.0f/s (%.2fx, target >= 0.4x)" %
          (a.runs, cm, tcp, cm / tcp))
    costs = [setup_costs(a.build) for _ in range(a.runs)]
    print("what each side of a connection sets up, medians of %d: ibv_create_cq %.1f us, "
          "ibv_create_qp %.1f us, ibv_destroy_qp %.1f us, ibv_destroy_cq %.1f us" %
          ((a.runs,) + tuple(statistics.median(c[k] for c in costs) for k in
                             ("create_cq_us", "create_qp_us", "destroy_qp_us", "destroy_cq_us"))))
    cpu = idle_cpu_seconds(a.build)
    if cpu is not None:
        print("idle: 100 connected RC QPs for 3 s used %.4f s of CPU" % cpu)
    ir = {op: instructions_per_op(a.build, "raw", 1, op) for op in ("write", "read", "fadd")}
    print("instructions per 8-byte operation, raw verbs at depth 1, post and poll included "
          "(callgrind; target <= 250): WRITE %.0f, READ %.0f, fetch-and-add %.0f" %
          (ir["write"], ir["read"], ir["fadd"]))
    if a.charts:
        chart(a.charts, "perftest_latency", medians["latency"], "latency",
              "8-byte latency, softrdma vs its peers (median of %d runs)" % a.runs)
        chart(a.charts, "perftest_bandwidth", medians["bandwidth"], "bandwidth",
              "Bandwidth, softrdma vs its peers (median of %d runs)" % a.runs)


if __name__ == "__main__":
    main()
