#!/usr/bin/env python3
"""Loopback TCP throughput: linerate against peer tools from Debian, in the same run.

For each tool: a server process and a client process on 127.0.0.1, the same flow count,
write size and duration; every tool runs --runs times, interleaved so that machine drift
hits all of them alike. Prints the median goodput each tool claims, the truth beside it,
the CPU seconds both processes used per Gbit moved, and the ratio of linerate to each peer.

Two set-ups, interleaved run by run (`--setup both`, the default):
- **isolated**: as root, every run takes place in a network namespace of its own that holds
  only `lo`, each side's processes in a control group of their own (their exact CPU time);
- **plain**: as a user runs the tools, in the host's namespace with no control groups.

Truth: the bytes `lo` counted over the client's wall time are what the tool moved (IP and
TCP headers included, about 0.1 % with 64 KiB segments; control traffic included, a few
kilobytes; in the plain set-up, whatever else the host sends over loopback meanwhile). A
tool that claims more than that has miscounted.

    python3 bench/peers.py                 # 1 flow, 3 x 5 s, both set-ups
    python3 bench/peers.py --flows 8
    python3 bench/peers.py --flows 8 --runs 5 --time 10 --setup plain

Needs iperf3, iperf (2), qperf and nuttcp (apt-get install iperf3 iperf qperf nuttcp);
missing peers are installed when run as root, else skipped. Builds linerate in release mode.
"""
import argparse, json, os, re, resource, shutil, signal, statistics, subprocess, sys, time

from common import LINERATE, build, free_port, machine


def proc_cpu(pid):
    """user + system seconds of a live process (all its threads), its reaped children and
    its live descendants. Misses a child that exited and was reaped by nobody (nuttcp's
    and qperf's per-test servers): the fallback without root; see CpuGroup."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(int(x) for x in fields[11:15]) / tick
    children = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children.update(int(c) for c in f.read().split())
    except FileNotFoundError:
        pass
    return total + sum(proc_cpu(child) for child in children)


class CpuGroup:
    """A control group holding one side's processes and everything they fork, whose CPU
    time the kernel keeps even for children that have exited: the exact CPU cost of a tool
    that serves each test in a forked child. As root with cgroup v1's cpuacct or cgroup v2;
    otherwise `None` from `make` and the /proc walk above is used."""

    ROOTS = [("/sys/fs/cgroup/cpuacct", "cpuacct.usage", 1e-9),
             ("/sys/fs/cgroup/unified", "cpu.stat", 1e-6),
             ("/sys/fs/cgroup", "cpu.stat", 1e-6)]

    @classmethod
    def make(cls, role):
        if os.geteuid() != 0:
            return None
        for root, stat, scale in cls.ROOTS:
            if os.path.exists(os.path.join(root, stat)) and os.path.exists(os.path.join(root, "cgroup.procs")):
                path = os.path.join(root, f"lrbench-{role}-{os.getpid()}-{time.monotonic_ns()}")
                try:
                    os.mkdir(path)
                except OSError:
                    continue
                return cls(path, stat, scale)
        return None

    def __init__(self, path, stat, scale):
        self.path, self.stat, self.scale = path, stat, scale

    def join(self):
        """For Popen's preexec_fn: moves the child, before it execs, into the group."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def seconds(self):
        with open(os.path.join(self.path, self.stat)) as f:
            text = f.read()
        if self.stat == "cpu.stat":
            text = next(line.split()[1] for line in text.splitlines() if line.startswith("usage_usec"))
        return int(text) * self.scale

    def remove(self):
        """Removes the group once its processes are gone: they are after communicate, but a
        server's workers may take a moment longer to exit (nginx's after its master)."""
        for _ in range(500):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.02)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Namespace:
    """A network namespace holding only `lo` (up), for counting what a tool moved; removed
    on exit. Without root, a no-op whose commands run where they are."""

    def __init__(self):
        self.name = f"lrbench{os.getpid()}x{time.monotonic_ns() % 1_000_000}" if os.geteuid() == 0 else None

    def __enter__(self):
        if self.name:
            subprocess.run(["ip", "netns", "add", self.name], check=True)
            subprocess.run(["ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up"], check=True)
        return self

    def __exit__(self, *exc):
        if self.name:
            subprocess.run(["ip", "netns", "del", self.name], check=False)

    def cmd(self, argv):
        return ["ip", "netns", "exec", self.name, *argv] if self.name else argv

    def lo_bytes(self):
        """Bytes `lo` has received in the namespace; None without one."""
        if not self.name:
            return None
        out = subprocess.run(self.cmd(["cat", "/sys/class/net/lo/statistics/rx_bytes"]),
                             capture_output=True, text=True, check=True)
        return int(out.stdout)


class HostLoopback:
    """The plain set-up: commands run where they are; the truth is the host's `lo`."""

    def cmd(self, argv):
        return argv

    def lo_bytes(self):
        with open("/sys/class/net/lo/statistics/rx_bytes") as f:
            return int(f.read())


# Truth of the last run: bytes lo counted and the client's wall time.
LAST_TRUTH = {}

# "isolated" or "plain" (the module docstring): set per run by main.
SETUP = "isolated"


def run_sides(server_cmd, client_cmd, settle=0.3, stop=signal.SIGTERM):
    """Runs a server process, then a client to completion, then stops the server with
    `stop`: in a namespace of their own and control groups (as root) in the isolated
    set-up, where they are in the plain one. Returns (client stdout, server stdout, server
    CPU s, client CPU s); LAST_TRUTH holds what lo counted."""
    if SETUP == "plain":
        return run_in(HostLoopback(), server_cmd, client_cmd, settle, stop, groups=False)
    with Namespace() as ns:
        return run_in(ns, ns.cmd(server_cmd), ns.cmd(client_cmd), settle, stop)


def run_in(ns, server_cmd, client_cmd, settle, stop, groups=True):
    server_group = CpuGroup.make("server") if groups else None
    client_group = CpuGroup.make("client") if groups else None
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=server_group.join if server_group else None)
    try:
        time.sleep(settle)
        s0 = server_group.seconds() if server_group else proc_cpu(server.pid)
        c0 = children_cpu()
        lo0, t0 = ns.lo_bytes(), time.monotonic()
        out = subprocess.run(client_cmd, capture_output=True, text=True, timeout=120,
                             preexec_fn=client_group.join if client_group else None)
        wall, lo1 = time.monotonic() - t0, ns.lo_bytes()
        LAST_TRUTH.clear()
        if lo0 is not None:
            LAST_TRUTH.update(bytes=lo1 - lo0, wall=wall)
        s1 = server_group.seconds() if server_group else proc_cpu(server.pid)
        client_cpu = client_group.seconds() if client_group else children_cpu() - c0
        if out.returncode != 0:
            raise RuntimeError(f"{client_cmd[0]} failed: {out.stderr.strip()[:200]}")
        time.sleep(0.2)  # a server's last report
        server.send_signal(stop)
        try:
            server_out = server.communicate(timeout=2)[0]
        except subprocess.TimeoutExpired:  # iperf2 waits for its threads: its report is out
            server.kill()
            server_out = server.communicate()[0]
        return out.stdout, server_out, s1 - s0, client_cpu
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
        for group in (server_group, client_group):
            if group:
                group.remove()


def run_pair(server_cmd, client_cmd, parse, settle=0.3):
    """The client's figure (parsed from its stdout) and the CPU seconds of both processes."""
    client_out, _, server_cpu, client_cpu = run_sides(server_cmd, client_cmd, settle)
    return parse(client_out), server_cpu + client_cpu


def linerate(flows, seconds, length):
    port = free_port()
    server = [LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q"]
    client = [LINERATE, "stream", "127.0.0.1", "-p", str(port), "-P", str(flows), "-t", str(seconds),
              *(["-l", length] if length else []), "--json"]
    return run_pair(server, client, lambda out: json.loads(out)["summary"]["receiver_bps"])


def iperf3(flows, seconds, length):
    port = free_port()
    server = ["iperf3", "-s", "-1", "-p", str(port)]
    client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(flows), "-t", str(seconds), *(["-l", length] if length else []), "-J"]
    return run_pair(server, client, lambda out: json.loads(out)["end"]["sum_received"]["bits_per_second"])


def iperf2(flows, seconds, length):
    port = free_port()
    server = ["iperf", "-s", "-p", str(port)]
    client = ["iperf", "-c", "127.0.0.1", "-p", str(port), "-P", str(flows), "-t", str(seconds), *(["-l", length] if length else []), "-y", "C"]

    def parse(out):
        # CSV rows, one per stream for the whole test (iperf 2.1 prints no sum row in CSV);
        # iperf2's client counts what it wrote.
        rows = [line.split(",") for line in out.strip().splitlines() if line.count(",") >= 8]
        sums = [r for r in rows if r[5] == "-1"]
        if sums:
            return float(sums[-1][8])
        return sum(float(r[8]) for r in rows if r[6].startswith("0.0-"))

    return run_pair(server, client, parse)


def qperf(flows, seconds, length):
    if flows != 1:
        return None
    port = free_port()
    server = ["qperf", "-lp", str(port)]
    client = ["qperf", "127.0.0.1", "-lp", str(port), "-t", str(seconds), *(["-m", length] if length else []), "tcp_bw"]

    def parse(out):
        m = re.search(r"bw\s*=\s*([\d.]+)\s*([KMG]?)B/sec", out)
        scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
        return float(m.group(1)) * scale * 8

    return run_pair(server, client, parse)


def nuttcp(flows, seconds, length):
    ctl, data = free_port(), free_port()
    server = ["nuttcp", "-1", f"-P{ctl}", f"-p{data}"]
    client = ["nuttcp", f"-T{seconds}", *([f"-l{length}"] if length else []), f"-N{flows}", f"-P{ctl}", f"-p{data}", "127.0.0.1"]

    def parse(out):
        m = re.search(r"([\d.]+) Mbps", out)
        return float(m.group(1)) * 1e6

    return run_pair(server, client, parse)


PEERS = {"iperf3": iperf3, "iperf2": iperf2, "qperf": qperf, "nuttcp": nuttcp}
BINARIES = {"iperf3": "iperf3", "iperf2": "iperf", "qperf": "qperf", "nuttcp": "nuttcp", "sockperf": "sockperf"}
PACKAGES = {"iperf3": "iperf3", "iperf2": "iperf", "qperf": "qperf", "nuttcp": "nuttcp", "sockperf": "sockperf"}


def ensure_peers(names):
    missing = [PACKAGES[n] for n in names if not shutil.which(BINARIES[n])]
    if missing and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False, env=env)
    return [n for n in names if shutil.which(BINARIES[n])]


def byte_count(text):
    """`131072`, `128K`, `128k`, `1M` (binary multiples, as linerate reads them) to bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", text)
    if not m:
        raise SystemExit(f"--length {text!r} is not a byte count like 131072 or 128K")
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1 << 20}[m.group(2).lower()]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flows", type=int, default=1)
    parser.add_argument("--time", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--length", default="128K",
                        help="bytes per write, with K/M as 1024s; every tool is given the plain byte count; "
                             "'default': each tool's own default, as a user runs it")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--setup", choices=["both", "isolated", "plain"], default="both",
                        help="isolated: a namespace and control groups per run; plain: as a user runs them")
    args = parser.parse_args()
    print(machine(), flush=True)
    # One byte count for every tool: the tools read suffixes differently (qperf's `128k`
    # is 128,000 bytes, linerate's and iperf's 131,072), and on some loopbacks writes of
    # 128,000 and 131,072 bytes differ by 1.7x (docs/performance.md).
    args.length = None if args.length == "default" else str(byte_count(args.length))
    global SETUP
    build()
    peers = ensure_peers([p for p in args.peers.split(",") if p])
    tools = {"linerate": linerate, **{p: PEERS[p] for p in peers}}
    setups = ["isolated", "plain"] if args.setup == "both" else [args.setup]
    results = {(setup, name): [] for setup in setups for name in tools}
    for run in range(args.runs):
        for setup in setups:
            SETUP = setup
            for name, fn in tools.items():
                try:
                    got = fn(args.flows, args.time, args.length)
                except Exception as error:  # a peer that fails is reported, not fatal
                    print(f"  {name}: run {run + 1} failed: {error}", file=sys.stderr)
                    continue
                if got is not None:
                    truth = LAST_TRUTH["bytes"] * 8 / LAST_TRUTH["wall"] if LAST_TRUTH else None
                    results[(setup, name)].append((*got, truth))
                    told = f"  lo {truth / 1e9:7.2f} Gbit/s" if truth else ""
                    print(f"  run {run + 1} {setup:8s} {name:8s} {got[0] / 1e9:7.2f} Gbit/s{told}  {got[1]:6.2f} CPU s",
                          file=sys.stderr)
    print(f"TCP loopback, {args.flows} flow(s), {args.length or 'default'} writes, median of {args.runs} x {args.time} s")
    print("claim: the tool's own figure; lo: bytes lo counted over the client's wall time;")
    print("CPU s/Gbit: both processes' CPU over the Gbits lo counted (over the claim without root);")
    print("the ratios compare linerate with each tool by lo's count, and by claims in brackets")
    print(f"{'tool':10s} {'claim Gbit/s':>12s} {'lo Gbit/s':>10s} {'claim/lo':>9s} {'CPU s/Gbit':>11s} "
          f"{'linerate/tool':>20s} {'CPU ratio':>10s}")

    def figures(rows):
        rate = statistics.median(r[0] for r in rows)
        truths = [r[2] for r in rows if r[2]]
        truth = statistics.median(truths) if truths else None
        # CPU per Gbit actually moved: a tool that overclaims does not look cheaper.
        cpu = statistics.median(r[1] / ((r[2] or r[0]) * args.time / 1e9) for r in rows)
        return rate, truth, cpu

    for setup in setups:
        print(f"set-up: {setup}")
        if not results[(setup, "linerate")]:
            print("  linerate did not run")
            continue
        mine_rate, mine_truth, mine_cpu = figures(results[(setup, "linerate")])
        for name in tools:
            rows = results[(setup, name)]
            if not rows:
                continue
            rate, truth, cpu = figures(rows)
            lo = f"{truth / 1e9:10.2f} {rate / truth:9.2f}" if truth else f"{'-':>10s} {'-':>9s}"
            by_lo = f"{mine_truth / truth:.2f}" if truth and mine_truth else "-"
            ratio = f"{by_lo} ({mine_rate / rate:.2f})"
            print(f"{name:10s} {rate / 1e9:12.2f} {lo} {cpu:11.4f} {ratio:>20s} {mine_cpu / cpu:10.2f}")


if __name__ == "__main__":
    main()
