#!/usr/bin/env python3
"""Loopback UDP packet rate: linerate against iperf3, qperf, sockperf and iperf2, in the
same run.

Every tool sends unpaced datagrams of --length bytes over one flow for --time seconds to a
server process on 127.0.0.1. The figure is what the receiver counted (datagrams that
arrived, per second), the median of --runs interleaved runs. Beside it: the sender's
rate, and the CPU seconds the sending process used per million datagrams sent and the
receiving process used per million received.

    python3 bench/udp.py                      # 64-byte datagrams, 3 x 5 s
    python3 bench/udp.py --length 1400
    python3 bench/udp.py --only linerate,linerate-gso,iperf3

"linerate" runs with its defaults (sendmmsg/recvmmsg batches, no offload);
"linerate-gso" adds --gso (the receiving socket takes the datagrams one by one);
"linerate-gro" adds --gso --gro (the receiving socket takes whole runs: on loopback and
veth a GSO buffer reaches it unsegmented, so this is no NIC's packet rate).
Where each tool counts:
  iperf3    server's count, carried in the client's JSON (end.sum_received)
  qperf     recv_bw over the test
  sockperf  the server's "Total N messages received" (SIGINT), over the client's seconds
  iperf2    the server's CSV report: datagrams less lost, over its interval
"""
import argparse, json, re, signal, statistics, sys

from common import LINERATE, build, free_port
from peers import ensure_peers, run_sides


def linerate(seconds, length, offload=()):
    port = free_port()
    server = [LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q"]
    client = [LINERATE, "stream", "127.0.0.1", "-p", str(port), "-u", "-b", "0", "-l", str(length),
              "-t", str(seconds), "--json", *offload]
    out, _, receiver_cpu, sender_cpu = run_sides(server, client)
    summary = json.loads(out)["summary"]
    return summary["receiver_pps"], summary["sender_pps"], receiver_cpu, sender_cpu


def linerate_gso(seconds, length):
    return linerate(seconds, length, ("--gso",))


def linerate_gso_gro(seconds, length):
    return linerate(seconds, length, ("--gso", "--gro"))


def iperf3(seconds, length):
    port = free_port()
    server = ["iperf3", "-s", "-1", "-p", str(port)]
    client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-u", "-b", "0", "-l", str(length),
              "-t", str(seconds), "-J"]
    out, _, receiver_cpu, sender_cpu = run_sides(server, client)
    end = json.loads(out)["end"]
    received, sent = end["sum_received"], end["sum_sent"]
    arrived = received["packets"] - received["lost_packets"]
    return arrived / received["seconds"], sent["packets"] / sent["seconds"], receiver_cpu, sender_cpu


def qperf(seconds, length):
    port = free_port()
    server = ["qperf", "-lp", str(port)]
    client = ["qperf", "127.0.0.1", "-lp", str(port), "-t", str(seconds), "-m", str(length), "udp_bw"]
    out, _, receiver_cpu, sender_cpu = run_sides(server, client)

    def rate(name):
        m = re.search(rf"{name}\s*=\s*([\d.]+)\s*([KMG]?)B/sec", out)
        return float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)] / length

    return rate("recv_bw"), rate("send_bw"), receiver_cpu, sender_cpu


def sockperf(seconds, length):
    port = free_port()
    server = ["sockperf", "server", "-i", "127.0.0.1", "-p", str(port)]
    client = ["sockperf", "throughput", "-i", "127.0.0.1", "-p", str(port), "-m", str(length),
              "-t", str(seconds)]
    out, server_out, receiver_cpu, sender_cpu = run_sides(server, client, stop=signal.SIGINT)
    m = re.search(r"Total of (\d+) messages sent in ([\d.]+) sec", out)
    sent, elapsed = int(m.group(1)), float(m.group(2))
    received = int(re.search(r"Total (\d+) messages received", server_out).group(1))
    return received / elapsed, sent / elapsed, receiver_cpu, sender_cpu


def iperf2(seconds, length):
    port = free_port()
    # Line-buffered so the server's CSV report is out before it is stopped.
    server = ["stdbuf", "-oL", "iperf", "-s", "-u", "-p", str(port), "-y", "C"]
    client = ["iperf", "-c", "127.0.0.1", "-u", "-p", str(port), "-b", "100G", "-l", str(length),
              "-t", str(seconds), "-y", "C"]
    _, server_out, receiver_cpu, sender_cpu = run_sides(server, client)
    # time,src,sport,dst,dport,id,interval,bytes,bps,jitter,lost,total,pct,ooo
    row = [line.split(",") for line in server_out.splitlines() if line.count(",") >= 12][-1]
    start, end = (float(x) for x in row[6].split("-"))
    lost, total = int(row[10]), int(row[11])
    return (total - lost) / (end - start), total / (end - start), receiver_cpu, sender_cpu


TOOLS = {"linerate": linerate, "linerate-gso": linerate_gso, "linerate-gro": linerate_gso_gro, "iperf3": iperf3, "qperf": qperf,
         "sockperf": sockperf, "iperf2": iperf2}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--only", default=",".join(TOOLS), help="comma-separated tools to run")
    args = parser.parse_args()
    build()
    wanted = args.only.split(",")
    unknown = [t for t in wanted if t not in TOOLS]
    if unknown:
        sys.exit(f"unknown tool(s): {', '.join(unknown)}; choose from {', '.join(TOOLS)}")
    peers = set(ensure_peers([t for t in wanted if not t.startswith("linerate")]))
    tools = {t: TOOLS[t] for t in wanted if t.startswith("linerate") or t in peers}
    results = {name: [] for name in tools}
    for run in range(args.runs):
        for name, fn in tools.items():
            try:
                row = fn(args.time, args.length)
            except Exception as error:  # a peer that fails is reported, not fatal
                print(f"  {name}: run {run + 1} failed: {error}", file=sys.stderr)
                continue
            results[name].append(row)
            print(f"  run {run + 1} {name:12s} {row[0] / 1e3:9.1f} kpps received {row[1] / 1e3:9.1f} sent",
                  file=sys.stderr)
    print(f"UDP loopback, 1 flow, {args.length}-byte datagrams, unpaced, median of {args.runs} x {args.time} s")
    print("CPU: seconds per million datagrams (receiver per received, sender per sent)")
    print(f"{'tool':12s} {'recv kpps':>10s} {'Mbit/s':>8s} {'sent kpps':>10s} {'recv CPU':>9s} {'send CPU':>9s}"
          f" {'linerate/tool':>14s} {'gso/tool':>9s} {'gro/tool':>9s}")
    median = lambda name, i: statistics.median(r[i] for r in results[name]) if results.get(name) else None
    mine, gso, gro = median("linerate", 0), median("linerate-gso", 0), median("linerate-gro", 0)
    for name, rows in results.items():
        if not rows:
            continue
        received, sent = median(name, 0), median(name, 1)
        receiver_cpu = statistics.median(r[2] / (r[0] * args.time / 1e6) for r in rows)
        sender_cpu = statistics.median(r[3] / (r[1] * args.time / 1e6) for r in rows)
        ratio = lambda x: f"{x / received:.2f}" if x else "-"
        print(f"{name:12s} {received / 1e3:10.1f} {received * args.length * 8 / 1e6:8.0f} {sent / 1e3:10.1f}"
              f" {receiver_cpu:9.3f} {sender_cpu:9.3f} {ratio(mine):>14s} {ratio(gso):>9s} {ratio(gro):>9s}")


if __name__ == "__main__":
    main()
