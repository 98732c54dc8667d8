#!/usr/bin/env python3
"""Two iperf 2 clients against one iperf 2 server (Debian's 2.1.8, `iperf -s`), interleaved
in one run: iperf 2's own client (`iperf -c`) and `linerate iperf2 -c`, the same flags each,
both directions (`-R`: the server sends), TCP and UDP. The server runs in a network
namespace across a veth pair; the referee is the client namespace's veth counters of the
same run (bytes sent, or received with `-R`), beside each client's own figure.

    python3 bench/iperf2_client.py [--runs 3] [--time 5] [--udp-rate 500m]

Needs root (namespaces) and `iperf`. Debian's 2.1.8 UDP server exits after one test, so a
UDP pair member starts its own.
"""
import argparse, json, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LINERATE, build, machine  # noqa: E402

NS_A, NS_B = "lrb2c_a", "lrb2c_b"
DEV_A, DEV_B = "lrb2c0", "lrb2c1"
ADDR_A, ADDR_B = "10.77.2.1", "10.77.2.2"


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def set_up():
    tear_down()
    sh("ip", "netns", "add", NS_A)
    sh("ip", "netns", "add", NS_B)
    sh("ip", "link", "add", DEV_A, "netns", NS_A, "type", "veth", "peer", "name", DEV_B,
       "netns", NS_B)
    for ns, dev, addr in [(NS_A, DEV_A, ADDR_A), (NS_B, DEV_B, ADDR_B)]:
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def tear_down():
    for ns in (NS_A, NS_B):
        sh("ip", "netns", "del", ns, check=False)


def counter(name):
    out = sh("ip", "netns", "exec", NS_A, "cat", f"/sys/class/net/{DEV_A}/statistics/{name}")
    return int(out.stdout)


def iperf_server(udp):
    args = ["ip", "netns", "exec", NS_B, "iperf", "-s"] + (["-u"] if udp else [])
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return server


def iperf_figure(stdout):
    """iperf 2's client CSV (`-y C`): the last connection line's bits a second; a UDP test
    the client sent ends with the server's report, the receiver's figure."""
    lines = [l.split(",") for l in stdout.splitlines() if l.count(",") >= 8]
    lines = [f for f in lines if f[5].lstrip("-").isdigit() and int(f[5]) > 0]
    return float(lines[-1][8]) if lines else float("nan")


def run_member(tool, flags, seconds, udp, reverse):
    server = iperf_server(udp) if udp else None
    referee = "rx_bytes" if reverse else "tx_bytes"
    before = counter(referee)
    if tool == "iperf 2":
        cmd = ["iperf", "-c", ADDR_B, "-t", str(seconds), "-y", "C"] + flags
    else:
        cmd = [LINERATE, "--no-store", "iperf2", "-c", ADDR_B, "-t", str(seconds), "--json"] + flags
    out = sh("ip", "netns", "exec", NS_A, *cmd, check=False)
    wire = (counter(referee) - before) * 8 / seconds
    if server is not None:
        server.kill()
        server.wait()
    if tool == "iperf 2":
        figure = iperf_figure(out.stdout)
    else:
        try:
            summary = json.loads(out.stdout)["summary"]
            # A TCP test this side sent holds the sender's figure alone (an iperf 2
            # server tells its client nothing).
            figure = summary["receiver_bps"] or summary["sender_bps"]
        except (ValueError, KeyError):
            figure = float("nan")
    return figure, wire


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time", type=int, default=5)
    parser.add_argument("--udp-rate", default="500m")
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/iperf2_client.py needs root (network namespaces)")
    if not args.no_build:
        build()
    modes = [
        ("tcp", [], False, False),
        ("tcp -R", ["-R"], False, True),
        (f"udp {args.udp_rate}", ["-u", "-b", args.udp_rate], True, False),
        (f"udp {args.udp_rate} -R", ["-u", "-b", args.udp_rate, "-R"], True, True),
    ]
    print(machine())
    set_up()
    tcp_server = iperf_server(False)
    results = {}
    try:
        for run in range(args.runs):
            for name, flags, udp, reverse in modes:
                # Interleaved, the order swapped each round.
                tools = ["iperf 2", "linerate"] if run % 2 == 0 else ["linerate", "iperf 2"]
                for tool in tools:
                    figure, wire = run_member(tool, flags, args.time, udp, reverse)
                    results.setdefault((name, tool), []).append((figure, wire))
                    print(f"round {run + 1} {name:>14} {tool:>8}: its figure "
                          f"{figure / 1e9:7.3f} Gbit/s, the veth {wire / 1e9:7.3f} Gbit/s",
                          flush=True)
    finally:
        tcp_server.kill()
        tcp_server.wait()
        tear_down()
    print()
    print(f"{'mode':>16} {'iperf 2 (veth, median)':>24} {'linerate (veth, median)':>24} {'ratio':>6}")
    for name, *_ in modes:
        medians = [statistics.median(w for _, w in results[(name, tool)])
                   for tool in ("iperf 2", "linerate")]
        ratio = medians[1] / medians[0] if medians[0] else float("nan")
        print(f"{name:>16} {medians[0] / 1e9:17.3f} Gbit/s {medians[1] / 1e9:17.3f} Gbit/s {ratio:6.2f}")


if __name__ == "__main__":
    main()
