#!/usr/bin/env python3
"""Loopback request/response latency and rate: linerate against peer tools from Debian,
in the same run.

TCP, one flow, one transaction in flight (netperf TCP_RR's shape). For each tool a
server and a client on 127.0.0.1; every tool runs --runs times, interleaved so that
machine drift hits all of them alike. Prints the median transactions/s and round trip,
and the ratio of linerate to each peer:

- linerate rr: 1-byte request and response; p50 and mean round trip from its histogram.
- sockperf ping-pong --full-rtt: 14-byte messages (its smallest); p50 and mean.
- qperf tcp_lat: 1-byte messages; mean only (it reports half the round trip: doubled).
- NPtcp (NetPIPE): 1-byte messages, fixed repeat count; mean only (half round trip:
  doubled).

Rows ending "-1cpu" run the peer with both ends pinned to one CPU by taskset. linerate
places its ends itself (a requester on one CPU, the responder on the CPU its requests arrive
on); the peers leave placement to the scheduler, which on a VM puts the two ends on
different CPUs and pays a cross-CPU wake-up per message. Both rows are shown so the gap
from placement and the gap from the rest can be told apart.

Connection rate (--crr): linerate crr beside iperf2 --connect-only, which opens and closes
connections without a request or response (a lighter transaction: reported beside, not as
a ratio target).

    python3 bench/rr.py                   # 3 x 5 s each
    python3 bench/rr.py --runs 5 --time 10 --crr
    python3 bench/rr.py --only linerate,sockperf-1cpu,qperf-1cpu,NPtcp-1cpu --runs 8

Needs sockperf, qperf, netpipe-tcp and iperf (installed when run as root, else skipped).
Builds linerate in release mode.
"""
import argparse, json, os, re, shutil, signal, statistics, subprocess, sys, tempfile, time

from common import LINERATE, build, free_port
from peers import run_sides

PACKAGES = {"sockperf": "sockperf", "qperf": "qperf", "NPtcp": "netpipe-tcp", "iperf": "iperf"}


def ensure(binaries):
    missing = [PACKAGES[b] for b in binaries if not shutil.which(b)]
    if missing and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False, env=env)
    return {b for b in binaries if shutil.which(b)}


# Each returns (transactions per second, p50 round trip in us or None, mean round trip us).

# Set while a peer runs with both ends pinned to one CPU by taskset (the "-1cpu" rows).
PIN = []


def sides(server, client, **kwargs):
    """run_sides, with both commands under taskset while PIN is set."""
    return run_sides(PIN + server, PIN + client, **kwargs)


def on_one_cpu(fn):
    """A peer run with both ends pinned to the CPU this script started on: what a user who
    knows to place them gets. linerate places its own ends (a requester on one CPU, the
    responder where its requests arrive); the peers leave it to the scheduler."""
    def run(seconds):
        PIN[:] = ["taskset", "-c", str(os.sched_getaffinity(0).__iter__().__next__())]
        try:
            return fn(seconds)
        finally:
            PIN.clear()
    return run

def linerate(seconds):
    port = free_port()
    server = [LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q"]
    client = [LINERATE, "rr", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-i", "0", "-J"]
    out, _, _, _ = run_sides(server, client)
    summary = json.loads(out)["summary"]
    return summary["transactions_per_s"], summary["latency_us"]["p50"], summary["latency_us"]["mean"]


def sockperf(seconds):
    port = free_port()
    server = ["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)]
    client = ["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", "14",
              "-t", str(seconds), "--full-rtt"]
    out, _, _, _ = sides(server, client, stop=signal.SIGINT)
    valid = re.search(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=\d+; ReceivedMessages=(\d+)", out)
    p50 = float(re.search(r"percentile 50\.000 =\s*([\d.]+)", out).group(1))
    mean = float(re.search(r"avg-rtt=([\d.]+)", out).group(1))
    return int(valid.group(2)) / float(valid.group(1)), p50, mean


def qperf(seconds):
    port = free_port()
    server = ["qperf", "-lp", str(port)]
    client = ["qperf", "127.0.0.1", "-lp", str(port), "-t", str(seconds), "-m", "1", "tcp_lat"]
    out, _, _, _ = sides(server, client)
    m = re.search(r"latency\s*=\s*([\d.]+)\s*(us|ms|ns)", out)
    half = float(m.group(1)) * {"ns": 1e-3, "us": 1.0, "ms": 1e3}[m.group(2)]
    return 1e6 / (2 * half), None, 2 * half


def nptcp(seconds, rate_hints={}):
    port = free_port()
    # The last rate seen in the same placement (pinned or not: they differ tenfold).
    key = bool(PIN)
    repeats = max(1000, int(rate_hints.get(key, 20000.0) * seconds))
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "np.out")
        server = ["NPtcp", "-P", str(port)]
        client = ["NPtcp", "-h", "127.0.0.1", "-P", str(port), "-l", "1", "-u", "1", "-p", "0",
                  "-n", str(repeats), "-o", output]
        sides(server, client)
        with open(output) as f:
            half = float(f.read().split()[2]) * 1e6
    rate = 1e6 / (2 * half)
    rate_hints[key] = rate  # the next run lasts about --time seconds
    return rate, None, 2 * half


def linerate_crr(seconds):
    port = free_port()
    server = [LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q"]
    client = [LINERATE, "crr", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-i", "0", "-J"]
    out, _, _, _ = run_sides(server, client)
    summary = json.loads(out)["summary"]
    return summary["transactions_per_s"], summary["latency_us"]["p50"], summary["latency_us"]["mean"]


def iperf2_connect(seconds, rate_hint=[5000.0]):
    port = free_port()
    count = max(1000, int(rate_hint[0] * seconds))
    # The server logs a line per connection: to /dev/null, or a full pipe stalls its accepts.
    server = subprocess.Popen(["iperf", "-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        started = time.monotonic()
        out = subprocess.run(["iperf", "-c", "127.0.0.1", "-p", str(port), f"--connect-only={count}"],
                             capture_output=True, text=True, timeout=120).stdout
        elapsed = time.monotonic() - started
    finally:
        server.kill()
        server.wait()
    rate = out.count("connected with") / elapsed
    rate_hint[0] = rate  # the next run lasts about --time seconds
    return rate, None, 1e6 / rate


RR = {"linerate": (linerate, None), "sockperf": (sockperf, "sockperf"), "qperf": (qperf, "qperf"),
      "NPtcp": (nptcp, "NPtcp"), "sockperf-1cpu": (on_one_cpu(sockperf), "sockperf"),
      "qperf-1cpu": (on_one_cpu(qperf), "qperf"), "NPtcp-1cpu": (on_one_cpu(nptcp), "NPtcp")}
CRR = {"linerate-crr": (linerate_crr, None), "iperf2-connect": (iperf2_connect, "iperf")}


def measure(tools, runs, seconds):
    results = {name: [] for name in tools}
    for run in range(runs):
        for name, (fn, _) in tools.items():
            try:
                row = fn(seconds)
            except Exception as error:  # a peer that fails is reported, not fatal
                print(f"  {name}: run {run + 1} failed: {error}", file=sys.stderr)
                continue
            results[name].append(row)
            p50 = f"{row[1]:.1f}" if row[1] is not None else "-"
            print(f"  run {run + 1} {name:15s} {row[0] / 1e3:8.2f} k/s  p50 {p50} us  mean {row[2]:.1f} us",
                  file=sys.stderr)
    return results


def table(title, results, mine):
    print(title)
    print(f"{'tool':15s} {'trans/s':>10s} {'p50 RTT us':>11s} {'mean RTT us':>12s}"
          f" {'rate linerate/tool':>19s} {'p50 linerate/tool':>18s}")
    median = lambda rows, i: statistics.median(r[i] for r in rows)
    own = results.get(mine)
    for name, rows in results.items():
        if not rows:
            continue
        rate, mean = median(rows, 0), median(rows, 2)
        p50s = [r[1] for r in rows if r[1] is not None]
        p50 = statistics.median(p50s) if p50s else None
        rate_ratio = f"{median(own, 0) / rate:.2f}" if own else "-"
        own_p50 = statistics.median(r[1] for r in own) if own else None
        # A peer without percentiles is compared on its mean round trip.
        theirs = p50 if p50 is not None else mean
        p50_ratio = f"{own_p50 / theirs:.2f}" if own_p50 and p50 is not None else (
            f"{own_p50 / theirs:.2f}*" if own_p50 else "-")
        print(f"{name:15s} {rate:10.0f} {p50 if p50 is not None else float('nan'):11.1f} {mean:12.1f}"
              f" {rate_ratio:>19s} {p50_ratio:>18s}")
    print("* against the peer's mean round trip (it reports no percentiles)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--crr", action="store_true", help="also measure connection rates")
    parser.add_argument("--only", help="comma-separated rows to run, e.g. linerate,NPtcp-1cpu "
                        f"(of {', '.join(RR)})")
    args = parser.parse_args()
    wanted = dict(RR)
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in RR]
        if unknown:
            parser.error(f"--only: unknown row {unknown[0]!r}; rows are {', '.join(RR)}")
        wanted = {n: RR[n] for n in names}
    build()
    if args.crr:
        wanted.update(CRR)
    have = ensure([binary for _, binary in wanted.values() if binary])
    tools = {name: spec for name, spec in wanted.items() if spec[1] is None or spec[1] in have}
    rr = {n: s for n, s in tools.items() if n in RR}
    results = measure(rr, args.runs, args.time)
    table(f"TCP request/response, loopback, 1 flow, 1 in flight, median of {args.runs} x {args.time} s",
          results, "linerate")
    if args.crr:
        crr = {n: s for n, s in tools.items() if n in CRR}
        results = measure(crr, args.runs, args.time)
        table(f"TCP connections, loopback, 1 flow, median of {args.runs} x {args.time} s "
              "(iperf2: handshake and close only)", results, "linerate-crr")


if __name__ == "__main__":
    main()
