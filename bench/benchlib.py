"""What the benchmark scripts share: ports, namespaces as hosts, server/client pairs, and the
peers' result parsers (perftest, ucx_perftest), and medians with ratios."""
import json
import os
import re
import socket
import statistics
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(argv, timeout=120, env=None):
    """Runs a tool with --json and returns its last JSON line."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, **(env or {})))
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError("%s failed: %s%s" % (" ".join(argv), out.stdout[-500:], out.stderr[-500:]))
    return json.loads(lines[-1])


def median_of(thunk, runs):
    return statistics.median(thunk() for _ in range(runs))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(port, limit=10.0, pid=None):
    deadline = time.time() + limit
    needle = ":%04X " % port
    base = "/proc/%d/net/" % pid if pid else "/proc/net/"
    while time.time() < deadline:
        for table in (base + "tcp", base + "tcp6"):
            with open(table) as f:
                for line in f:
                    if needle in line and " 0A " in line:
                        return True
        time.sleep(0.02)
    return False


class Hosts:
    """Where server and client run: this host, or two network namespaces."""

    def __init__(self, two=False):
        self.two = two
        self.ns = []
        if two:
            tag = str(os.getpid())
            self.ns = ["bench-a-" + tag, "bench-b-" + tag]
            va, vb = "bka" + tag, "bkb" + tag
            cmds = [["ip", "netns", "add", self.ns[0]], ["ip", "netns", "add", self.ns[1]],
                    ["ip", "link", "add", va, "type", "veth", "peer", "name", vb],
                    ["ip", "link", "set", va, "netns", self.ns[0]],
                    ["ip", "link", "set", vb, "netns", self.ns[1]]]
            for i, dev in enumerate((va, vb)):
                cmds += [["ip", "-n", self.ns[i], "addr", "add", self.addr(i) + "/24", "dev", dev],
                         ["ip", "-n", self.ns[i], "link", "set", dev, "up"],
                         ["ip", "-n", self.ns[i], "link", "set", "lo", "up"]]
            for c in cmds:
                subprocess.run(c, check=True)
            self.devices = [va, vb]

    def addr(self, host):
        if not self.two:
            return "127.0.0.1"
        return "198.51.100.1" if host == 0 else "198.51.100.2"

    def on(self, host):
        return ["ip", "netns", "exec", self.ns[host]] if self.two else []

    def close(self):
        for ns in self.ns:
            subprocess.run(["ip", "netns", "delete", ns])


def reap(proc, timeout):
    """Waits for `proc` like Popen.wait, and returns the CPU seconds (user + system) it and
    its waited-for children used."""
    deadline = time.time() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime
        if time.time() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.01)


def pair(server_cmd, client_cmd, env=None, port_flag="-p", hosts=None, server_cpu=False):
    """Runs a server and then its client; returns the client's output, and with `server_cpu`
    also the CPU seconds the server used."""
    hosts = hosts or Hosts()
    port = free_port()
    env = dict(os.environ, **(env or {}))
    server = subprocess.Popen(hosts.on(0) + server_cmd + [port_flag, str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if not wait_listening(port, pid=server.pid if hosts.two else None):
            raise RuntimeError("server did not listen: %s" % server_cmd)
        out = subprocess.run(hosts.on(1) + client_cmd + [port_flag, str(port)], env=env,
                             capture_output=True, text=True, timeout=300).stdout
        if server_cpu:
            return out, reap(server, 30)
        server.wait(timeout=30)
        return out
    finally:
        if server.poll() is None:
            server.kill()


def perftest(run, tool, args, hosts=None, rate=False, server_cpu=False):
    """perftest: t_typical (µs) for *_lat, else BW average (MiB/s), or Mpps with `rate`;
    with `server_cpu`, a pair of that and the CPU seconds the server used."""
    hosts = hosts or Hosts()
    out = pair([run, tool] + args, [run, tool] + args + [hosts.addr(0)], hosts=hosts,
               server_cpu=server_cpu)
    if server_cpu:
        out, cpu = out
        return perftest_result(tool, out, rate), cpu
    return perftest_result(tool, out, rate)


def perftest_result(tool, out, rate):
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+[\d.]", l)]
    if not rows:
        raise RuntimeError("no result from %s: %s" % (tool, out[-500:]))
    row = rows[-1]
    if rate:
        return float(row[4])  # MsgRate, Mpps
    if tool.endswith("_bw"):
        return float(row[3])  # BW average, MiB/s
    return float(row[4])  # t_typical, usec


def ucx(test, size, tls, hosts=None, iterations=20000, rate=False, extra=(), bandwidth=None):
    """ucx_perftest: p50 latency (µs) for *_lat tests, else MB/s (`bandwidth` decides for a
    test such as ucp_get that measures both), or messages/s with `rate`."""
    hosts = hosts or Hosts()
    env = {"UCX_TLS": tls}
    if hosts.two:
        env["UCX_NET_DEVICES"] = ",".join(hosts.devices)
    args = ["ucx_perftest"]
    out = pair(args, args + [hosts.addr(0), "-t", test, "-s", str(size), "-n", str(iterations)]
               + list(extra), env=env, hosts=hosts)
    final = [l.split() for l in out.splitlines() if l.startswith("Final:")]
    if not final:
        raise RuntimeError("no result from ucx_perftest %s: %s" % (test, out[-500:]))
    f = final[-1]
    # Final: iterations, p50 latency, avg latency, overall latency, avg MB/s, overall MB/s,
    # avg msg/s, overall msg/s
    if rate:
        return float(f[8])
    if bandwidth is None:
        bandwidth = test.endswith("_bw")
    return float(f[5]) if bandwidth else float(f[2])


def cpus_busy_during(thunk, start=0.5, window=0.5):
    """Runs `thunk` and returns its result with the share of all CPUs (0-1) busy from `start`
    seconds after it began, for `window` seconds (/proc/stat): what a stream leaves idle.
    The thunk must run longer than start + window."""
    def sample():
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait

    share = {}

    def measure():
        time.sleep(start)
        a = sample()
        time.sleep(window)
        b = sample()
        share["busy"] = 1 - (b[1] - a[1]) / (b[0] - a[0])

    t = threading.Thread(target=measure)
    t.start()
    result = thunk()
    t.join()
    return result, share["busy"]


def chart(directory, name, series, metric, title, bars=True):
    """Saves each series ({label: [JSON objects]}) as DIR/NAME-LABEL.json and draws them on
    one chart, DIR/NAME.png, with tools/rdmakit-plot (as a user would)."""
    os.makedirs(directory, exist_ok=True)
    runs = []
    for label, objects in series.items():
        if not objects:
            continue
        slug = re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower()
        path = os.path.join(directory, "%s-%s.json" % (name, slug))
        with open(path, "w") as f:
            for o in objects:
                f.write(json.dumps(o) + "\n")
        runs.append("%s:%s" % (path, label))
    output = os.path.join(directory, name + ".png")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "rdmakit-plot")] + runs +
                   ["-o", output, "--metric", metric, "--title", title] +
                   (["--bars"] if bars else []), check=True)
    print("wrote", output)

