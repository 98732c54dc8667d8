#!/usr/bin/env python3
"""Multicast: linerate's sender and receiver against iperf 2's, interleaved in one run.

Three namespaces on one bridge (a sender, two receivers); one receiver is linerate's
(`serve --join GROUP%IF`), the other iperf 2's (`iperf -s -u -B GROUP`); both hear every
sender. Each run sends to the group for --time seconds, from linerate
(`stream GROUP -u`) and from iperf 2 (`iperf -c GROUP -u`) in turn, at --rate (a rate
asked) and unpaced (-b 20G: as fast as each can). Beside each tool's own figures, the
referee: the sender's interface (`tx_packets`) and each receiver's kernel
(`/proc/net/snmp` `Udp InDatagrams`).

    python3 bench/multicast.py                    # 3 runs x 3 s, 1,470-byte datagrams, 1G and unpaced
    python3 bench/multicast.py --rate 500M --runs 5

Needs root (namespaces) and iperf 2 (Debian's `iperf`).
"""
import argparse, json, os, re, signal, statistics, subprocess, sys, time

from common import LINERATE, build, machine

HUB, NS = "lrbm-hub", ["lrbm-0", "lrbm-1", "lrbm-2"]
GROUP = "239.7.7.7"


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True).stdout


def star_up():
    star_down()
    sh("ip", "netns", "add", HUB)
    sh("ip", "-n", HUB, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", HUB, "link", "set", "br0", "up")
    for i, ns in enumerate(NS):
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"lrbmo{i}", "type", "veth", "peer", "name", f"lrbmi{i}")
        sh("ip", "link", "set", f"lrbmo{i}", "netns", HUB)
        sh("ip", "link", "set", f"lrbmi{i}", "netns", ns)
        sh("ip", "-n", HUB, "link", "set", f"lrbmo{i}", "master", "br0")
        sh("ip", "-n", HUB, "link", "set", f"lrbmo{i}", "up")
        sh("ip", "-n", ns, "addr", "add", f"10.79.0.{i + 1}/24", "dev", f"lrbmi{i}")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", f"lrbmi{i}", "up")
        sh("ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", f"lrbmi{i}")


def star_down():
    for ns in NS + [HUB]:
        sh("ip", "netns", "del", ns, check=False)


def tx_packets():
    return int(sh("ip", "netns", "exec", NS[0], "cat", "/sys/class/net/lrbmi0/statistics/tx_packets"))


def delivered(ns):
    text = sh("ip", "netns", "exec", ns, "cat", "/proc/net/snmp")
    rows = [l.split() for l in text.splitlines() if l.startswith("Udp:")]
    return int(rows[1][rows[0].index("InDatagrams")])


def linerate_send(rate, seconds):
    out = sh("ip", "netns", "exec", NS[0], LINERATE, "stream", GROUP, "-u", "-b", rate,
             "-t", str(seconds), "--json")
    doc = json.loads(out)
    return doc["datagrams"], doc["sent_bps"]


def iperf2_send(rate, seconds):
    out = sh("ip", "netns", "exec", NS[0], "iperf", "-c", GROUP, "-u", "-T", "1", "-b", rate,
             "-t", str(seconds), "-B", "10.79.0.1", "-e")
    sent = int(re.search(r"Sent (\d+) datagrams", out).group(1))
    written = [int(m) for m in re.findall(r"\s(\d+)/\d+\s+\d+ pps", out)]
    bps = [float(v) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[u]
           for v, u in re.findall(r"([\d.]+) ([KMG]?)bits/sec", out)]
    return (written[-1] if written else sent), (bps[-1] if bps else 0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time", type=int, default=3)
    parser.add_argument("--rate", default="1G")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/multicast.py needs root for its namespaces")
    build()
    print(machine())
    star_up()
    receivers = [
        subprocess.Popen(["ip", "netns", "exec", NS[1], LINERATE, "serve", "--port", "0",
                          "--no-tls", "-q", "--join", f"{GROUP}%lrbmi1", "--log-format", "json"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True),
        subprocess.Popen(["ip", "netns", "exec", NS[2], "iperf", "-s", "-u", "-B", GROUP],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    time.sleep(1)
    results = {}
    try:
        for rate in (args.rate, "20G"):
            for _ in range(args.runs):
                for name, send in (("linerate", linerate_send), ("iperf2", iperf2_send)):
                    before = (tx_packets(), delivered(NS[1]), delivered(NS[2]))
                    count, bps = send(rate, args.time)
                    time.sleep(0.5)
                    after = (tx_packets(), delivered(NS[1]), delivered(NS[2]))
                    results.setdefault((rate, name), []).append(
                        (count, bps, *(a - b for a, b in zip(after, before))))
    finally:
        for r in receivers:
            r.send_signal(signal.SIGINT)
        for r in receivers:
            try:
                r.wait(timeout=5)
            except subprocess.TimeoutExpired:
                r.kill()
        star_down()
    print(f"{'rate asked':>10} {'sender':>9} {'its count':>10} {'its Mbit/s':>11} "
          f"{'tx_packets':>11} {'linerate rx':>12} {'iperf2 rx':>10}  (medians of {args.runs})")
    for rate in (args.rate, "20G"):
        medians = {}
        for name in ("linerate", "iperf2"):
            rows = results[(rate, name)]
            m = [statistics.median(col) for col in zip(*rows)]
            medians[name] = m
            print(f"{rate:>10} {name:>9} {m[0]:>10.0f} {m[1] / 1e6:>11.1f} {m[2]:>11.0f} "
                  f"{m[3]:>12.0f} {m[4]:>10.0f}")
        ratio = medians["linerate"][2] / max(medians["iperf2"][2], 1)
        print(f"{rate:>10} linerate/iperf2 datagrams on the wire: {ratio:.2f}")


if __name__ == "__main__":
    main()
