#!/usr/bin/env python3
"""How long `linerate trace -P 8` takes over a path of 30 hops: a chain of network
namespaces (a client, 29 routers, a server) joined by veth pairs, each router forwarding
and answering without an ICMP rate limit (a quiet path), traced with each kind of probe,
interleaved with Debian's traceroute (-P 8 has no peer; traceroute's own paris-free UDP
default with -q 1 and -N 16 is the nearest) over the same chain.

Printed per run: the wall time of the command, the hops the trace reached the server at
(the reference: the chain's length, known by construction) and what traceroute found.

    sudo python3 bench/trace_hops.py                 # 30 hops, 3 runs
    sudo python3 bench/trace_hops.py --hops 30 --runs 5

Needs root and iproute2; traceroute is optional.
"""
import argparse, json, os, shutil, subprocess, sys, time

from common import LINERATE, build, machine


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


class Chain:
    """Namespaces n0 (client) .. nN (server); link k joins nk (10.201.k.1) and nk+1
    (10.201.k.2)."""

    def __init__(self, hops, tag):
        self.hops, self.tag = hops, tag
        self.names = [f"{tag}{k}" for k in range(hops + 1)]

    def build(self):
        for name in self.names:
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        for k in range(self.hops):
            a, b = self.names[k], self.names[k + 1]
            left, right = f"{self.tag}l{k}", f"{self.tag}r{k}"
            sh("ip", "link", "add", left, "netns", a, "type", "veth", "peer", "name", right,
               "netns", b)
            sh("ip", "-n", a, "addr", "add", f"10.201.{k}.1/24", "dev", left)
            sh("ip", "-n", b, "addr", "add", f"10.201.{k}.2/24", "dev", right)
            sh("ip", "-n", a, "link", "set", left, "up")
            sh("ip", "-n", b, "link", "set", right, "up")
        for k, name in enumerate(self.names):
            # A quiet path: no per-peer limit on the routers' answers.
            sh("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.ip_forward=1",
               "net.ipv4.icmp_ratelimit=0")
            batch = []
            if k < self.hops:
                batch.append(f"route add 10.201.0.0/16 via 10.201.{k}.2")
            if k > 0:
                # The links behind, more specific than the way ahead.
                for j in range(k - 1):
                    batch.append(f"route add 10.201.{j}.0/24 via 10.201.{k - 1}.1")
            if batch:
                subprocess.run(["ip", "-n", name, "-batch", "-"], input="\n".join(batch) + "\n",
                               text=True, check=True, capture_output=True)

    def remove(self):
        for name in self.names:
            sh("ip", "netns", "del", name, check=False)

    @property
    def server(self):
        return f"10.201.{self.hops - 1}.2"


def timed(args):
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return time.perf_counter() - start, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hops", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/trace_hops.py needs root (network namespaces)")
    build()
    print(machine(), flush=True)
    chain = Chain(args.hops, f"lth{os.getpid() % 1000}n")
    try:
        chain.build()
        client = chain.names[0]
        print(f"a chain of {args.hops} hops to {chain.server}")
        for run in range(args.runs):
            for probe in ([], ["--tcp"], ["--icmp"]):
                wall, out = timed(["ip", "netns", "exec", client, LINERATE, "--no-store",
                                   "trace", chain.server, "-P", "8", "-m", "40", "--json",
                                   *probe])
                if out.returncode != 0:
                    sys.exit(f"trace {probe}: {out.stderr}")
                doc = json.loads(out.stdout)
                reached = sorted({p["reached_ttl"] for p in doc["paths"]},
                                 key=lambda x: (x is None, x))
                print(f"run {run + 1} linerate trace -P 8 {' '.join(probe) or '(udp)':>7}: "
                      f"{wall:.3f} s wall, the document's {doc['duration_s']:.3f} s; "
                      f"reached at {reached} (the chain: {args.hops})", flush=True)
            if shutil.which("traceroute"):
                wall, out = timed(["ip", "netns", "exec", client, "traceroute", "-n", "-q", "1",
                                   "-N", "16", "-m", "40", chain.server])
                lines = [l for l in out.stdout.splitlines()[1:] if l.strip()]
                print(f"run {run + 1} traceroute -q 1 -N 16: {wall:.3f} s wall, "
                      f"{len(lines)} hops listed", flush=True)
    finally:
        chain.remove()


if __name__ == "__main__":
    sys.exit(main())
