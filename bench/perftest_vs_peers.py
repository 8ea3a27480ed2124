#!/usr/bin/env python3
"""softrdma under unmodified perftest, side by side with UCX in one run, with ratios.

Same host: perftest on softrdma against ucx_perftest over shared memory (UCX_TLS=posix,cma),
the peer a user would otherwise pick on a machine without an RDMA NIC. Each pair runs
--runs times, interleaved, and the medians are compared. Idle cost: CPU used by a process
holding 100 connected idle QPs.

Usage: bench/perftest_vs_peers.py [--build build] [--runs 5]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(port, limit=10.0):
    deadline = time.time() + limit
    needle = ":%04X " % port
    while time.time() < deadline:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for line in f:
                    if needle in line and " 0A " in line:
                        return True
        time.sleep(0.02)
    return False


def pair(server_cmd, client_cmd, env=None, port_flag="-p"):
    port = free_port()
    env = dict(os.environ, **(env or {}))
    server = subprocess.Popen(server_cmd + [port_flag, str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if not wait_listening(port):
            raise RuntimeError("server did not listen: %s" % server_cmd)
        out = subprocess.run(client_cmd + [port_flag, str(port)], env=env, capture_output=True,
                             text=True, timeout=120).stdout
        server.wait(timeout=30)
        return out
    finally:
        if server.poll() is None:
            server.kill()


def perftest(run, tool, args):
    out = pair([run, tool] + args, [run, tool] + args + ["127.0.0.1"])
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+[\d.]", l)]
    if not rows:
        raise RuntimeError("no result from %s: %s" % (tool, out[-500:]))
    row = rows[-1]
    if tool.endswith("_bw"):
        return float(row[3])  # BW average, MiB/s (MsgRate for atomics is row[4])
    return float(row[4])  # t_typical, usec


def ucx(test, size, tls):
    args = ["ucx_perftest"]
    out = pair(args, args + ["127.0.0.1", "-t", test, "-s", str(size), "-n", "20000"],
               env={"UCX_TLS": tls})
    final = [l.split() for l in out.splitlines() if l.startswith("Final:")]
    if not final:
        raise RuntimeError("no result from ucx_perftest %s: %s" % (test, out[-500:]))
    f = final[-1]
    return float(f[5]) if test.endswith("_bw") else float(f[2])  # MB/s avg, or p50 latency


def idle_cpu_seconds(build):
    exe = os.path.join(build, "bench", "idle_qps")
    if not os.path.exists(exe):
        return None
    out = subprocess.run([os.path.join(build, "softrdma-run"), exe, "100", "3"],
                         capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"cpu_seconds=([\d.]+)", out)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    run = os.path.join(a.build, "softrdma-run")
    cases = [
        # (label, softrdma measurement, UCX measurement, higher is better, target ratio)
        ("write bw 64 KiB (MiB/s)", lambda: perftest(run, "ib_write_bw", ["-s", "65536", "-n", "20000"]),
         lambda: ucx("ucp_put_bw", 65536, "posix,cma"), True, 1.0),
        ("write lat 8 B (us)", lambda: perftest(run, "ib_write_lat", ["-s", "8", "-n", "20000"]),
         lambda: ucx("ucp_put_lat", 8, "posix,cma"), False, 1.5),
        ("read lat 8 B (us)", lambda: perftest(run, "ib_read_lat", ["-s", "8", "-n", "20000"]),
         lambda: ucx("ucp_get", 8, "posix,cma"), False, 1.5),
        ("atomic lat 8 B (us)", lambda: perftest(run, "ib_atomic_lat", ["-n", "20000"]),
         lambda: ucx("ucp_fadd", 8, "posix,cma"), False, 1.5),
    ]
    print("same host, medians of %d interleaved runs; peer = UCX over shared memory" % a.runs)
    print("%-26s %12s %12s %8s %10s" % ("test", "softrdma", "UCX", "ratio", "target"))
    for label, ours, theirs, higher, target in cases:
        o, t = [], []
        for _ in range(a.runs):
            o.append(ours())
            t.append(theirs())
        mo, mt = statistics.median(o), statistics.median(t)
        ratio = mo / mt
        met = ratio >= target if higher else ratio <= target
        print("%-26s %12.3f %12.3f %7.2fx %5s%.1fx %s" % (label, mo, mt, ratio, ">=" if higher else "<=",
                                                         target, "met" if met else "not met"))
    cpu = idle_cpu_seconds(a.build)
    if cpu is not None:
        print("idle: 100 connected RC QPs for 3 s used %.4f s of CPU" % cpu)


if __name__ == "__main__":
    main()
