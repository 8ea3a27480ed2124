#!/usr/bin/env python3
"""`rdmakit kv` against Redis and memcached on this machine, GET rate per server core.

Same workload for all: 100 000 keys preloaded, 32-byte values, 100 % GETs with uniform keys,
one server thread (Redis executes commands on one thread; memcached runs with `-t 1`; the
kv server busy-polls one thread), one load-generating client on the other core:

- rdmakit kv over shm:// and rc:// (on softrdma): one client, 32 operations in flight
  (`-c 1 -q 32`); every value it reads is checked. Also its one-sided GETs (`--one-sided`:
  the client READs the table, the server's CPU does nothing for a GET), shown apart.
- Redis: `redis-benchmark -t get -P 32 -d 32 -r 100000` after a SET pass over the same
  keys; pipelining 32 deep per connection is Redis's own fast path. Run with 1 and with 4
  connections and the better taken (on this 2-core machine more connections only add
  client work).
- memcached: `memcaslap` (memaslap, from libmemcached-tools) with 32 connections on one thread, GETs only
  after its own preload of about 100 000 keys (32 x a 3k-key window: 98 304); memaslap has no
  pipelining, so memcached is measured at 32 requests in flight, like the others.

Every contender runs --runs times, interleaved; medians are compared, and the ratio to
Redis's GET rate is printed against the target (>= 3x over shm:// and rc://).

Usage: bench/kv_vs_peers.py [--build build] [--runs 3] [--seconds 2] [--markdown]
                           [--charts DIR]   (DIR/kv_get_rate.png, drawn by rdmakit-plot)
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

from benchlib import ROOT, chart, free_port, run_json, wait_listening

KEYS = 100_000
VALUE = 32


class Server:
    """A server process, killed on exit."""

    def __init__(self, argv, port=None):
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        if port and not wait_listening(port):
            self.close()
            raise RuntimeError("did not listen: %s" % " ".join(argv))

    def close(self):
        self.proc.kill()
        self.proc.wait()


def rdmakit_kv(build, scheme, seconds, extra=""):
    run = os.path.join(build, "softrdma-run")
    tool = os.path.join(build, "tools", "rdmakit")
    if scheme == "shm":
        url, port = "shm://kv-bench-%d-%d" % (os.getpid(), time.monotonic_ns()), None
    else:
        port = free_port()
        url = "%s://127.0.0.1:%d" % (scheme, port)
    server = Server([run, tool, "kv", url, "--serve", "-D", "120", "--keys", str(KEYS),
                     "-s", str(VALUE)], port)
    try:
        j = run_json([run, tool, "kv", url, "--json", "-D", str(seconds), "--keys", str(KEYS),
                      "-s", str(VALUE), "-r", "100", "-c", "1", "-q", "32"] + extra.split())
    finally:
        server.close()
    if j["errors"] or j["wrong_values"]:
        raise RuntimeError("rdmakit kv reported errors: %s" % j)
    return j["ops_per_second"]


def redis(seconds, connections):
    port = free_port()
    server = Server(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                     "--bind", "127.0.0.1"], port)
    try:
        common = ["redis-benchmark", "-p", str(port), "-r", str(KEYS), "-d", str(VALUE), "-P", "32",
                  "--csv"]
        subprocess.run(common + ["-t", "set", "-n", str(4 * KEYS), "-c", "4"], check=True,
                       capture_output=True, timeout=120)
        # About `seconds` of GETs: redis-benchmark counts requests, not time.
        out = subprocess.run(common + ["-t", "get", "-n", str(int(seconds * 2_000_000)),
                                       "-c", str(connections)],
                             check=True, capture_output=True, text=True, timeout=300).stdout
    finally:
        server.close()
    m = re.search(r'^"GET","([\d.]+)"', out, re.M)
    if not m:
        raise RuntimeError("no GET figure from redis-benchmark: " + out[-300:])
    return float(m.group(1))


def memcached(seconds):
    port = free_port()
    server = Server(["memcached", "-p", str(port), "-U", "0", "-t", "1", "-l", "127.0.0.1",
                     "-m", "1024", "-u", "root"], port)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".cfg") as cfg:
            # key sizes, value sizes, then the command mix: 0 = set, 1 = get
            cfg.write("key\n16 16 1\nvalue\n%d %d 1\ncmd\n0 0.0\n1 1.0\n" % (VALUE, VALUE))
            cfg.flush()
            out = subprocess.run(["memcaslap", "-s", "127.0.0.1:%d" % port, "-F", cfg.name,
                                  "-t", "%ds" % max(1, round(seconds)), "-c", "32", "-T", "1",
                                  "-w", "%dk" % (KEYS // 32 // 1024)],
                                 capture_output=True, text=True, timeout=120).stdout
    finally:
        server.close()
    gets = re.search(r"cmd_get: (\d+)", out)
    run_time = re.search(r"Run time: ([\d.]+)s Ops", out)
    if not gets or not run_time:
        raise RuntimeError("no result from memaslap: " + out[-300:])
    return int(gets.group(1)) / float(run_time.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--charts", help="directory for the chart and its data")
    a = ap.parse_args()
    contenders = [
        ("rdmakit kv shm://", lambda: rdmakit_kv(a.build, "shm", a.seconds)),
        ("rdmakit kv rc://", lambda: rdmakit_kv(a.build, "rc", a.seconds)),
        ("rdmakit kv rc:// one-sided GETs", lambda: rdmakit_kv(a.build, "rc", a.seconds,
                                                                "--one-sided")),
        ("Redis, 1 connection", lambda: redis(a.seconds, 1)),
        ("Redis, 4 connections", lambda: redis(a.seconds, 4)),
        ("memcached -t 1", lambda: memcached(a.seconds)),
    ]
    values = {label: [] for label, _ in contenders}
    for _ in range(a.runs):
        for label, thunk in contenders:
            try:
                values[label].append(thunk())
            except Exception as e:  # reported; the others still run
                print("  %s: %s" % (label, str(e)[:300]))
    med = {label: statistics.median(v) for label, v in values.items() if v}
    redis_best = max((v for l, v in med.items() if l.startswith("Redis")), default=None)
    print("GETs per second, %d keys, %d-byte values, one server core, medians of %d runs"
          % (KEYS, VALUE, a.runs))
    if a.markdown:
        print("| server | GETs/s | vs Redis | target (>= 3x Redis) |\n|---|---|---|---|")
    for label, v in med.items():
        ratio = v / redis_best if redis_best else float("nan")
        target = ""
        if label in ("rdmakit kv shm://", "rdmakit kv rc://"):
            target = "met" if ratio >= 3 else "not met"
        if a.markdown:
            print("| %s | %.0f | %.2fx | %s |" % (label, v, ratio, target))
        else:
            print("    %-34s %12.0f  %6.2fx Redis  %s" % (label, v, ratio, target))
    if a.charts:
        chart(a.charts, "kv_get_rate",
              {label: [{"workload": "GETs, %d keys, %d B values" % (KEYS, VALUE),
                        "ops_per_second": v}] for label, v in med.items()},
              "rate", "GETs per second, one server core (medians of %d)" % a.runs)


if __name__ == "__main__":
    main()
