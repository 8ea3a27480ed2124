#!/usr/bin/env python3
"""Instructions a perftest client spends in softrdma per iteration across two hosts: the
server runs natively in one network namespace, the client under callgrind in the other
(root), once with --iters and once with twice as many; the difference per extra iteration
is printed in total and for the library's heaviest functions (inclusive, instructions per
iteration). Polls that find nothing count too, so the total moves with timing; the
functions that carry out a request do not.

Usage: bench/cross_host_callgrind.py [--build build] [--tool ib_send_lat] [--iters 2000]
                                     [--top 25] [-- PERFTEST ARGS...]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Hosts, free_port, reap, wait_listening  # noqa: E402


def profile(build, hosts, tool, iters, extra, out_dir):
    """Runs one pair; returns the client's callgrind output file."""
    run = os.path.join(build, "softrdma-run")
    port = free_port()
    args = [tool, "-n", str(iters)] + extra
    server = subprocess.Popen(hosts.on(0) + [run] + args + ["-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_listening(port, pid=server.pid):
            raise RuntimeError("the server did not listen")
        out = os.path.join(out_dir, "client.%d" % iters)
        # The arena is reserved smaller: valgrind cannot reserve the default's address space.
        client = hosts.on(1) + ["env", "SOFTRDMA_ARENA_GIB=4", "valgrind", "--tool=callgrind",
                                "--trace-children=yes", "--callgrind-out-file=" + out + ".%p",
                                run] + args + ["-p", str(port), hosts.addr(0)]
        subprocess.run(client, capture_output=True, text=True, timeout=600, check=True)
        reap(server, 60)
    finally:
        if server.poll() is None:
            server.kill()
    # softrdma-run executes softrdma-view, which executes the tool: the tool's file is the
    # one that names it.
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if name.startswith("client.%d." % iters):
            with open(path, errors="replace") as f:
                if re.search(r"^cmd:\s+(\S*/)?%s\s" % re.escape(tool), f.read(4096), re.M):
                    return path
    raise RuntimeError("no callgrind output names %s" % tool)


def inclusive(path):
    """{function: inclusive instructions}, and the program's total."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                          capture_output=True, text=True, check=True).stdout
    costs, total = {}, 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S.*)", line)
        if not m or m.group(2).startswith("=>"):  # a call line, not a function's own
            continue
        n = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in m.group(2):
            total = n
        elif "/softrdma/" in m.group(2) and ":" in m.group(2):
            name = m.group(2).split(":", 1)[1].split(" [")[0]
            costs[name] = max(costs.get(name, 0), n)
    return costs, total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--tool", default="ib_send_lat")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("extra", nargs="*", help="perftest arguments (after --)")
    a = ap.parse_args()
    extra = a.extra or ["-s", "8"]
    hosts = Hosts(two=True)
    try:
        with tempfile.TemporaryDirectory() as out_dir:
            short = inclusive(profile(a.build, hosts, a.tool, a.iters, extra, out_dir))
            long = inclusive(profile(a.build, hosts, a.tool, 2 * a.iters, extra, out_dir))
    finally:
        hosts.close()
    per = {name: (long[0][name] - short[0].get(name, 0)) / a.iters for name in long[0]}
    print("%s %s across two namespaces, client under callgrind: instructions per iteration"
          % (a.tool, " ".join(extra)))
    print("%10.0f  the whole client" % ((long[1] - short[1]) / a.iters))
    for name, n in sorted(per.items(), key=lambda kv: -kv[1])[:a.top]:
        print("%10.0f  %s" % (n, name[:150]))


if __name__ == "__main__":
    main()
