#!/usr/bin/env python3
"""The path emulator's own cost: the delay it adds, the rate it forwards without loss of
its own, its CPU per Gbit and per frame, and how late it releases frames under a TCP stream
(docs/impair.md, docs/performance.md).

Needs root. Truth comes from outside the emulator:
- added delay: round trips (linerate rr) through a lab with no impairment against the same
  namespaces cabled directly (a veth pair);
- its own loss: frames the router's interface received (kernel counter) against frames the
  emulator passed, for UDP floods of 1500-byte and 64-byte frames;
- CPU: the emulator process's utime+stime (/proc/PID/stat) over the flood;
- lateness under load: a TCP stream (BBR) through a lab with no impairment and through a
  100 ms, 1 Gbit/s one; the sender's goodput, the emulator's CPU per frame it passed and
  its own account of lateness per direction (mean, most, share over 100 us);
- whole segments (`--offloads`): TCP through a lab with offloads against the same stream
  over a veth pair with offloads (the machine without the emulator), interleaved; the
  emulator's frame count against the client's TCP OutSegs.

    sudo python3 bench/impair.py [--time 4] [--only frames|offloads|threads] [--runs 3]
    sudo python3 bench/impair.py --only threads --threads 1,4   # forwarding threads
    sudo python3 bench/impair.py --only aqm --runs 3            # CoDel, FQ-CoDel, drop-tail
"""

import argparse
import json
import os
import subprocess
import sys
import time

from common import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "linerate")


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, **kw)


def lab(*args, check=True):
    return sh(BIN, "lab", *args, check=check)


def counter(ns, dev, name):
    out = sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/statistics/{name}")
    return int(out.stdout.strip())


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rr(ns_client, target, seconds):
    out = sh("ip", "netns", "exec", ns_client, BIN, "--no-store", "rr", target,
             "-t", str(seconds), "--json")
    doc = json.loads(out.stdout)
    lat = doc["summary"]["latency_us"]
    return lat["p50"], lat["p99"]


def veth_pair():
    """Two namespaces cabled by a plain veth pair (offloads as the kernel sets them)."""
    a, b = "lrbench-a", "lrbench-b"
    for ns in (a, b):
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", "eth0", "netns", a, "type", "veth", "peer", "name", "eth0", "netns", b)
    sh("ip", "-n", a, "addr", "add", "10.78.0.1/24", "dev", "eth0")
    sh("ip", "-n", b, "addr", "add", "10.78.0.2/24", "dev", "eth0")
    for ns in (a, b):
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
    return a, b


def drop_veth_pair(a, b):
    for ns in (a, b):
        sh("ip", "netns", "del", ns, check=False)


def over_veth_pair(measure):
    """`measure(client_namespace)` with `linerate serve` at 10.78.0.2 across a plain veth
    pair; the pair is removed after."""
    a, b = veth_pair()
    server = subprocess.Popen(["ip", "netns", "exec", b, BIN, "--no-store", "serve", "-q"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        return measure(a)
    finally:
        server.terminate()
        server.wait()
        drop_veth_pair(a, b)


def direct_rtt(seconds):
    """rr over a plain veth pair between two namespaces."""
    return over_veth_pair(lambda ns: rr(ns, "10.78.0.2", seconds))


def tcp_direct(seconds):
    """A TCP stream over a plain veth pair: what the machine does with no emulator."""
    def stream(ns):
        out = sh("ip", "netns", "exec", ns, BIN, "--no-store", "stream", "10.78.0.2",
                 "-t", str(seconds), "--json")
        return json.loads(out.stdout)["summary"]["receiver_bps"] / 1e9
    return over_veth_pair(stream)


def out_segs(ns):
    """The TCP segments a namespace has sent, as frames (OutSegs counts a segment as the
    frames it is cut into)."""
    out = sh("ip", "netns", "exec", ns, "cat", "/proc/net/snmp")
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("OutSegs")])


def emulator_pid(name):
    pids = sh("ip", "netns", "pids", f"lrlab-{name}-router").stdout.split()
    return int(pids[0])


def flood(name, length, seconds, flows=1):
    """UDP as fast as the client sends, over `flows` flows; returns (frames in at the
    router, passed, Mbit/s passed, emulator CPU s per Gbit, receiver pps)."""
    router = f"lrlab-{name}-router"
    pid = emulator_pid(name)
    rx0 = counter(router, "to-client", "rx_packets")
    status0 = json.load(open(f"/run/linerate/lab/{name}/status.json"))
    cpu0 = cpu_seconds(pid)
    out = lab("exec", "--name", name, "client", "--", BIN, "--no-store", "stream", "10.77.0.2",
              "-u", "-b", "0", "-l", str(length), "-t", str(seconds), "-P", str(flows), "--json")
    cpu1 = cpu_seconds(pid)
    time.sleep(1.5)  # the status file is rewritten every second
    rx1 = counter(router, "to-client", "rx_packets")
    status1 = json.load(open(f"/run/linerate/lab/{name}/status.json"))
    doc = json.loads(out.stdout)
    c0, c1 = status0["directions"][0]["counters"], status1["directions"][0]["counters"]
    passed = c1["passed"] - c0["passed"]
    arrived = c1["arrived"] - c0["arrived"]
    gbits = (c1["passed_bytes"] - c0["passed_bytes"]) * 8 / 1e9
    return {
        "frames_in_kernel": rx1 - rx0,
        "frames_seen": arrived,
        "frames_passed": passed,
        "own_loss": (rx1 - rx0) - arrived,
        "gbit_s": gbits / seconds,
        "pps": passed / seconds,
        "cpu_s_per_gbit": (cpu1 - cpu0) / gbits if gbits else float("nan"),
        "receiver_pps": doc["summary"]["receiver_pps"],
        "cpu_us_per_frame": (cpu1 - cpu0) / max(passed, 1) * 1e6,
        # What every frame the emulator took in cost, dropped or passed.
        "cpu_us_per_arrival": (cpu1 - cpu0) / max(arrived, 1) * 1e6,
        "aqm_drops": c1.get("aqm_drops", 0) - c0.get("aqm_drops", 0),
        "queue_drops": c1["queue_drops"] - c0["queue_drops"],
        "thread_passed": [b - a for a, b in zip(
            status0["directions"][0].get("thread_passed", [c0["passed"]]),
            status1["directions"][0].get("thread_passed", [c1["passed"]]))],
        "ring_drops": sum(d.get("ring_drops", 0) for d in status1["directions"])
        - sum(d.get("ring_drops", 0) for d in status0["directions"]),
    }


def status(name):
    return json.load(open(f"/run/linerate/lab/{name}/status.json"))


def tcp_through(name, seconds):
    """A TCP stream through the lab: goodput, emulator CPU per frame and its lateness."""
    pid = emulator_pid(name)
    before = status(name)
    cpu0 = cpu_seconds(pid)
    out = lab("exec", "--name", name, "client", "--", BIN, "--no-store", "stream", "10.77.0.2",
              "-C", "bbr", "-t", str(seconds), "--json")
    cpu1 = cpu_seconds(pid)
    time.sleep(1.5)  # the status file is rewritten every second
    after = status(name)
    doc = json.loads(out.stdout)
    frames = 0
    lateness = []
    wire_frames = after["directions"][0]["counters"].get("passed_wire_frames", 0) - \
        before["directions"][0]["counters"].get("passed_wire_frames", 0)
    for d0, d1 in zip(before["directions"], after["directions"]):
        c0, c1 = d0["counters"], d1["counters"]
        passed = c1["passed"] - c0["passed"]
        frames += passed
        lateness.append({
            "mean_us": (c1["late_sum_ns"] - c0["late_sum_ns"]) / max(passed, 1) / 1e3,
            "max_us": c1["late_max_ns"] / 1e3,
            "over_100us": (c1["late_frames"] - c0["late_frames"]) / max(passed, 1),
            "ring_drops": d1.get("ring_drops", 0) - d0.get("ring_drops", 0),
        })
    return {
        "gbit_s": doc["summary"]["receiver_bps"] / 1e9,
        "cpu_us_per_frame": (cpu1 - cpu0) / max(frames, 1) * 1e6,
        "cpu_share": (cpu1 - cpu0) / seconds,
        "lateness": lateness,
        "forward_wire_frames": wire_frames,
    }


def print_tcp(label, r):
    print(f"{label}: {r['gbit_s']:.2f} Gbit/s; emulator {r['cpu_share'] * 100:.0f} % of a CPU, "
          f"{r['cpu_us_per_frame']:.2f} us per frame passed")
    for direction, late in zip(("forward", "reverse"), r["lateness"]):
        print(f"  {direction}: late by {late['mean_us']:.1f} us on average, at most "
              f"{late['max_us']:.0f} us, {late['over_100us'] * 100:.1f} % over 100 us; "
              f"ring drops {late['ring_drops']}")


def offloads(name, args):
    """TCP through `lab up --offloads` against a veth pair, run by run; the emulator's
    frames against the client's OutSegs."""
    lab("down", "--name", name)
    lab("up", "--name", name, "--offloads")
    server = subprocess.Popen([BIN, "lab", "exec", "--name", name, "server", "--",
                               BIN, "--no-store", "serve", "-q"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        for run in range(args.runs):
            direct = tcp_direct(args.time)
            sent0 = out_segs(f"lrlab-{name}-client")
            r = tcp_through(name, args.time)
            sent = out_segs(f"lrlab-{name}-client") - sent0
            print(f"run {run + 1}: veth pair {direct:.2f} Gbit/s; through the lab with --offloads "
                  f"{r['gbit_s']:.2f} Gbit/s ({r['gbit_s'] / direct:.2f}x); emulator "
                  f"{r['cpu_share'] * 100:.0f} % of a CPU, {r['cpu_us_per_frame']:.2f} us per "
                  f"segment; frames passed {r['forward_wire_frames']}, client's TCP sent {sent}")
            for direction, late in zip(("forward", "reverse"), r["lateness"]):
                print(f"  {direction}: late by {late['mean_us']:.1f} us on average, at most "
                      f"{late['max_us']:.0f} us, {late['over_100us'] * 100:.1f} % over 100 us; "
                      f"ring drops {late['ring_drops']}")
    finally:
        server.terminate()
        server.wait()
        lab("down", "--name", name)


def threads(args):
    """Forwarding threads: the same lossy, delayed path (1 % loss, 50 ms each way, frames)
    with 1 thread a direction and with more, interleaved run by run; 4 UDP flows of
    1514-byte frames as fast as the client sends. The router's kernel counts what it was
    handed; the emulator's counts say what it saw, passed and how that spread."""
    counts = [int(t) for t in args.threads.split(",")]
    rows = {t: [] for t in counts}
    for run in range(args.runs):
        for t in counts:
            name = f"thr{t}"
            lab("down", "--name", name, check=False)
            lab("up", "--name", name, "--delay", "50ms", "--loss", "1%", "--threads", str(t))
            server = subprocess.Popen([BIN, "lab", "exec", "--name", name, "server",
                                       "--", BIN, "--no-store", "serve", "-q"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(0.5)
                r = flood(name, 1472, args.time, flows=4)
            finally:
                server.terminate()
                server.wait()
                lab("down", "--name", name)
            rows[t].append(r)
            print(f"run {run + 1}, {t} thread(s) a direction: passed {r['gbit_s']:.2f} Gbit/s "
                  f"({r['pps'] / 1e3:.0f} kpps), own loss {r['own_loss']} of "
                  f"{r['frames_in_kernel']} (ring {r['ring_drops']}), "
                  f"CPU {r['cpu_us_per_frame']:.2f} us a frame, per thread {r['thread_passed']}")
    for t in counts:
        median = lambda key: sorted(r[key] for r in rows[t])[len(rows[t]) // 2]
        print(f"median, {t} thread(s): {median('gbit_s'):.2f} Gbit/s passed, "
              f"{median('cpu_us_per_frame'):.2f} us CPU a frame, own loss {median('own_loss')}")


def aqm(args):
    """The AQM's cost per frame against drop-tail's: 8 UDP flows of 1514-byte frames as
    fast as the client sends, through a bottleneck above what they offer (the queue stays
    empty: the cost of passing through the AQM's queue) and through one below it (the
    queue full and managed: CoDel's drops, FQ-CoDel's queues), interleaved run by run.
    CPU is the emulator's utime+stime over the flood, per frame it took in."""
    kinds = ["drop-tail", "codel", "fq_codel"]
    rates = [("10G", "an idle queue"), ("300M", "a full queue")]
    rows = {(rate, kind): [] for rate, _ in rates for kind in kinds}
    for run in range(args.runs):
        for rate, _ in rates:
            for kind in kinds:
                name = f"aqm{run}"
                lab("down", "--name", name, check=False)
                lab("up", "--name", name, "--rate", rate, "--queue", "20ms", "--aqm", kind)
                server = subprocess.Popen([BIN, "lab", "exec", "--name", name,
                                           "server", "--", BIN, "--no-store", "serve", "-q"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    time.sleep(0.5)
                    r = flood(name, 1472, args.time, flows=8)
                finally:
                    server.terminate()
                    server.wait()
                    lab("down", "--name", name)
                rows[(rate, kind)].append(r)
                print(f"run {run + 1}, rate {rate}, {kind}: took in {r['frames_seen']} frames, "
                      f"passed {r['gbit_s']:.2f} Gbit/s, AQM drops {r['aqm_drops']}, queue "
                      f"drops {r['queue_drops']}, CPU {r['cpu_us_per_arrival']:.2f} us a frame "
                      f"taken in", flush=True)
    for rate, what in rates:
        median = lambda kind: sorted(r["cpu_us_per_arrival"] for r in rows[(rate, kind)])[
            len(rows[(rate, kind)]) // 2]
        base = median("drop-tail")
        print(f"median, rate {rate} ({what}): drop-tail {base:.2f} us a frame; " + "; ".join(
            f"{kind} {median(kind):.2f} us ({median(kind) / base:.2f}x)" for kind in kinds[1:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time", type=int, default=4)
    parser.add_argument("--only", choices=["frames", "offloads", "threads", "aqm"],
                        help="only the frame-by-frame rows, only the whole-segment ones, "
                             "only forwarding threads against one, or only the AQMs' cost")
    parser.add_argument("--threads", default="1,2",
                        help="forwarding threads a direction to compare (--only threads)")
    parser.add_argument("--runs", type=int, default=3, help="runs of the whole-segment rows")
    args = parser.parse_args()
    print(machine(), flush=True)
    if os.geteuid() != 0:
        sys.exit("bench/impair.py needs root (network namespaces)")
    if not os.path.exists(BIN):
        sh("cargo", "build", "--release", cwd=ROOT)
    name = "bench"
    if args.only == "threads":
        threads(args)
        return
    if args.only == "aqm":
        aqm(args)
        return
    if args.only != "frames":
        offloads(name, args)
    if args.only == "offloads":
        return
    lab("down", "--name", name)
    lab("up", "--name", name)
    server = subprocess.Popen([BIN, "lab", "exec", "--name", name, "server", "--",
                               BIN, "--no-store", "serve", "-q"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        direct = direct_rtt(args.time)
        through = rr(f"lrlab-{name}-client", "10.77.0.2", args.time)
        print(f"round trip, direct veth:      p50 {direct[0]:8.1f} us  p99 {direct[1]:8.1f} us")
        print(f"round trip, through emulator: p50 {through[0]:8.1f} us  p99 {through[1]:8.1f} us")
        print(f"added by the emulator (two passes): p50 {through[0] - direct[0]:.1f} us, "
              f"p99 {through[1] - direct[1]:.1f} us")
        for length, label in ((1472, "1514-byte frames"), (18, "60-byte frames")):
            r = flood(name, length, args.time)
            print(f"{label}: passed {r['gbit_s']:.2f} Gbit/s, {r['pps'] / 1e3:.0f} kpps; "
                  f"kernel gave it {r['frames_in_kernel']} frames, it saw {r['frames_seen']} "
                  f"(own loss {r['own_loss']}, of which a full ring {r['ring_drops']}), passed {r['frames_passed']}; "
                  f"CPU {r['cpu_s_per_gbit']:.3f} s/Gbit; receiver {r['receiver_pps'] / 1e3:.0f} kpps")
        print_tcp("TCP through the lab, no impairment", tcp_through(name, args.time))
    finally:
        server.terminate()
        server.wait()
        lab("down", "--name", name)
    lab("up", "--name", name, "--rtt", "100ms", "--rate", "1G", "--buffers", "64M")
    server = subprocess.Popen([BIN, "lab", "exec", "--name", name, "server", "--",
                               BIN, "--no-store", "serve", "-q"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        print_tcp("TCP through 100 ms and 1 Gbit/s", tcp_through(name, max(args.time, 10)))
    finally:
        server.terminate()
        server.wait()
        lab("down", "--name", name)


if __name__ == "__main__":
    main()
