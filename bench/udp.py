#!/usr/bin/env python3
"""Loopback UDP packet rate: linerate against iperf3 and qperf, in the same run.

Every tool sends unpaced datagrams of --length bytes over one flow for --time seconds to a
server process on 127.0.0.1; the figure is what the receiver counted (datagrams that
arrived, per second), the median of --runs interleaved runs, with the CPU seconds both
processes used per million datagrams received.

    python3 bench/udp.py                      # 64-byte datagrams, 3 x 5 s
    python3 bench/udp.py --length 1400

linerate runs with its defaults (sendmmsg/recvmmsg batches, no GSO).
"""
import argparse, json, re, statistics, sys

from common import LINERATE, build, free_port
from peers import ensure_peers, run_pair


def linerate(seconds, length):
    port = free_port()
    server = [LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q"]
    client = [LINERATE, "stream", "127.0.0.1", "-p", str(port), "-u", "-b", "0", "-l", str(length),
              "-t", str(seconds), "--json"]
    return run_pair(server, client, lambda out: json.loads(out)["summary"]["receiver_pps"])


def iperf3(seconds, length):
    port = free_port()
    server = ["iperf3", "-s", "-1", "-p", str(port)]
    client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-u", "-b", "0", "-l", str(length),
              "-t", str(seconds), "-J"]

    def parse(out):
        # The client's JSON carries the server's receive counts in end.sum_received (3.12)
        # or end.sum (older); packets less lost over the receiver's seconds.
        end = json.loads(out)["end"]
        s = end.get("sum_received") or end["sum"]
        packets = s.get("packets", 0) - s.get("lost_packets", 0)
        if not packets:
            packets = s["bytes"] / length
        return packets / s["seconds"]

    return run_pair(server, client, parse)


def qperf(seconds, length):
    port = free_port()
    server = ["qperf", "-lp", str(port)]
    client = ["qperf", "127.0.0.1", "-lp", str(port), "-t", str(seconds), "-m", str(length), "udp_bw"]

    def parse(out):
        m = re.search(r"recv_bw\s*=\s*([\d.]+)\s*([KMG]?)B/sec", out)
        scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
        return float(m.group(1)) * scale / length

    return run_pair(server, client, parse)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--length", type=int, default=64)
    args = parser.parse_args()
    build()
    peers = ensure_peers(["iperf3", "qperf"])
    tools = {"linerate": linerate, **{p: {"iperf3": iperf3, "qperf": qperf}[p] for p in peers}}
    results = {name: [] for name in tools}
    for run in range(args.runs):
        for name, fn in tools.items():
            try:
                pps, cpu = fn(args.time, args.length)
            except Exception as error:  # a peer that fails is reported, not fatal
                print(f"  {name}: run {run + 1} failed: {error}", file=sys.stderr)
                continue
            results[name].append((pps, cpu))
            print(f"  run {run + 1} {name:8s} {pps / 1e3:9.1f} kpps  {cpu:6.2f} CPU s", file=sys.stderr)
    print(f"UDP loopback, 1 flow, {args.length}-byte datagrams, unpaced, median of {args.runs} x {args.time} s")
    print(f"{'tool':10s} {'recv kpps':>10s} {'CPU s/Mpkt':>11s} {'linerate/tool':>14s}")
    mine = statistics.median(r[0] for r in results["linerate"])
    for name, rows in results.items():
        if not rows:
            continue
        pps = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] / (r[0] * args.time / 1e6) for r in rows)
        print(f"{name:10s} {pps / 1e3:10.1f} {cpu:11.3f} {mine / pps:14.2f}")


if __name__ == "__main__":
    main()
