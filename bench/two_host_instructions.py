#!/usr/bin/env python3
"""Instructions per 8-byte request across two hosts, counted by callgrind: a figure that holds
still where this machine's times do not.

The server of `ib_send_lat` (two network namespaces joined by veth; root) runs under
callgrind against a client at full speed. (Not `ib_write_lat`: its server spins on its buffer
without calling the library, which leaves the requests to softrdma's serving thread, and
under valgrind that thread gets too little of the CPU for the client's retries to last.) Printed per message, from the server's
profile: the instructions of `ibv_post_send` (softrdma::post_send, the request to the other
host up to its `sendmsg`, and the look at the sockets after it) and of executing a request
that arrived (wire::InboundConnection::execute_complete: parse, deliver, completion, the
acknowledgement it holds). The poll loop's count depends on how long it waits, so it is not
a figure. With several library directories (copies of build/softrdma/lib), each is counted
in turn and compared with the first.

Usage: bench/two_host_instructions.py [--build build] [--iterations 20000] [LIB_DIR...]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Hosts, pair, perftest_result  # noqa: E402

TOOLS = ["ib_send_lat"]
# callgrind_annotate's inclusive line of each function, by the file that defines it.
FUNCTIONS = {
    "ibv_post_send": r"src/verbs/post\.cpp:softrdma::post_send\(",
    "executing a request": r"src/wire/inbound_connection\.cpp:softrdma::wire::InboundConnection"
                           r"::execute_complete\(\)",
}


def per_message(build, lib, tool, iterations, hosts):
    """Instructions per message of each of FUNCTIONS in the server of `tool` on `lib`."""
    run = os.path.join(build, "softrdma-run")
    env = {"SOFTRDMA_LIB_DIR": lib, "SOFTRDMA_ARENA_GIB": "4"}
    args = [tool, "-s", "8", "-n", str(iterations)]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        client = pair([run, "valgrind", "--tool=callgrind", "--callgrind-out-file=" + out] + args,
                      [run] + args + [hosts.addr(0)], env=env, hosts=hosts)
        perftest_result(tool, client, rate=False)  # raises, saying why, if the run failed
        report = subprocess.run(["callgrind_annotate", "--inclusive=yes", out],
                                capture_output=True, text=True, check=True).stdout
    counts = {}
    for name, pattern in FUNCTIONS.items():
        found = [int(m.group(1).replace(",", "")) for m in
                 re.finditer(r"^\s*([\d,]+) .*" + pattern, report, re.MULTILINE)]
        if not found:
            raise RuntimeError("%s: no %s in the profile" % (tool, name))
        counts[name] = max(found) / iterations
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("libs", nargs="*")
    a = ap.parse_args()
    libs = a.libs or [os.path.join(a.build, "softrdma", "lib")]
    hosts = Hosts(two=True)
    try:
        print("instructions per 8-byte message in the server, two hosts (callgrind)")
        for tool in TOOLS:
            first = None
            for lib in libs:
                counts = per_message(a.build, lib, tool, a.iterations, hosts)
                first = first or counts
                print("%-13s %-28s %s" % (tool, lib, "   ".join(
                    "%s %.0f (%.2fx)" % (name, n, n / first[name]) for name, n in counts.items())))
    finally:
        hosts.close()


if __name__ == "__main__":
    main()
