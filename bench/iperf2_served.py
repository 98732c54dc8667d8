#!/usr/bin/env python3
"""One iperf 2 client (Debian's 2.1.8) against two servers, interleaved in one run: iperf 2's
own (`iperf -s`, `iperf -s -u`) and `linerate serve` on iperf 2's port. Each pair runs the
same client flags; the figures are what each server counted, beside the kernel's own count
of the same run as the referee: the loopback interface's bytes (TCP) and `Udp: InDatagrams`
and `RcvbufErrors` (UDP: what reached the server's socket, and what its full buffer dropped).

    python3 bench/iperf2_served.py [--runs 3] [--time 5]
"""
import argparse, json, os, re, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LINERATE, build, free_port, machine  # noqa: E402

MODES = [
    ("tcp", ["-P", "1"]),
    ("tcp", ["-P", "4"]),
    ("tcp -R", ["-R"]),
    ("udp 1G", ["-u", "-b", "1g", "-l", "1470"]),
    ("udp 10G", ["-u", "-b", "10g", "-l", "1470"]),
]


def lo_rx_bytes():
    with open("/sys/class/net/lo/statistics/rx_bytes") as f:
        return int(f.read())


def udp_counters():
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    counts = dict(zip(rows[0][1:], map(int, rows[1][1:])))
    return counts["InDatagrams"], counts["RcvbufErrors"]


def steal_share(before, after):
    """The share of CPU time the hypervisor gave elsewhere between two /proc/stat readings."""
    total = sum(after) - sum(before)
    return (after[7] - before[7]) / total if total else 0.0


def stat_now():
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:9]]


def iperf_server(port, udp):
    args = ["iperf", "-s", "-p", str(port), "-y", "C"] + (["-u"] if udp else [])
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def linerate_server(port, db):
    return subprocess.Popen([LINERATE, "--db", db, "serve", "-p", str(free_port()),
                             "--iperf2-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def run_pair_member(kind, flags, seconds, udp):
    port = free_port()
    with tempfile.TemporaryDirectory() as work:
        db = os.path.join(work, "runs.db")
        server = iperf_server(port, udp) if kind == "iperf 2" else linerate_server(port, db)
        time.sleep(0.5)
        lo0, (in0, drop0), st0 = lo_rx_bytes(), udp_counters(), stat_now()
        client = subprocess.run(["iperf", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                                 *flags], capture_output=True, text=True, timeout=seconds + 30)
        time.sleep(1.0)
        lo1, (in1, drop1), st1 = lo_rx_bytes(), udp_counters(), stat_now()
        server.terminate()
        out, _ = server.communicate(timeout=10)
        figure = None
        if kind == "iperf 2":
            # The server's CSV lines, one a connection: bytes (8th field) over the
            # interval (7th), summed over the connections, over the longest interval.
            lines = [l.split(",") for l in (out or "").splitlines() if l.count(",") >= 8]
            lines = [l for l in lines if int(l[5]) > 0]
            if lines:
                seconds = max(float(l[6].split("-")[1]) - float(l[6].split("-")[0]) for l in lines)
                figure = sum(float(l[7]) for l in lines) * 8 / max(seconds, 1e-9)
        else:
            show = subprocess.run([LINERATE, "--db", db, "show", "1", "--json"],
                                  capture_output=True, text=True)
            if show.returncode == 0:
                doc = json.loads(show.stdout)
                key = "sender_bps" if "-R" in flags else "receiver_bps"
                figure = doc["summary"][key]
        return {
            "figure": figure,
            "lo_bytes": lo1 - lo0,
            "in_datagrams": in1 - in0,
            "rcvbuf_errors": drop1 - drop0,
            "steal": steal_share(st0, st1),
            "client": client.stdout.strip().splitlines()[-1:] if client.stdout else [],
        }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time", type=int, default=5)
    args = parser.parse_args()
    build()
    print(machine())
    print(f"{args.runs} runs of {args.time} s, each pair interleaved")
    print("| mode | server | run | counted Mbit/s | lo bytes | UDP InDatagrams | RcvbufErrors | steal |")
    print("|---|---|---|---|---|---|---|---|")
    for run in range(args.runs):
        for mode, flags in MODES:
            udp = "-u" in flags
            for kind in (["iperf 2", "linerate"] if run % 2 == 0 else ["linerate", "iperf 2"]):
                r = run_pair_member(kind, flags, args.time, udp)
                figure = "-" if r["figure"] is None else f"{r['figure'] / 1e6:,.1f}"
                print(f"| {mode} | {kind} | {run + 1} | {figure} | {r['lo_bytes']:,} | "
                      f"{r['in_datagrams']:,} | {r['rcvbuf_errors']:,} | {r['steal'] * 100:.1f} % |",
                      flush=True)


if __name__ == "__main__":
    main()
