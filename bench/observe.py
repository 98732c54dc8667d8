#!/usr/bin/env python3
"""The cost of --observe: one loopback TCP flow with and without it, interleaved.

Each round runs `linerate stream` once observing (the default) and once with
--no-observe, against a separate `linerate serve`. Prints the median goodput and CPU
seconds per Gbit of both, their ratio, and the milliseconds the host readings took on
each end (the observation's own `read_ms`, paid once at each edge of the window).

    python3 bench/observe.py                 # 5 rounds x 5 s
    python3 bench/observe.py --runs 9 --time 10
"""
import argparse, json, statistics, subprocess, sys, time

from common import LINERATE, build, free_port
from peers import run_sides


def one(seconds, observe):
    port = free_port()
    server = [LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q"]
    client = [LINERATE, "stream", "127.0.0.1", "-p", str(port), "-t", str(seconds), "--json", "--no-store"]
    if not observe:
        client.append("--no-observe")
    out, _, server_cpu, client_cpu = run_sides(server, client)
    doc = json.loads(out)
    bps = doc["summary"]["receiver_bps"]
    read = doc.get("observe") or {}
    read_ms = sum((read.get(side) or {}).get("read_ms", 0.0) for side in ("local", "remote"))
    return bps, (server_cpu + client_cpu) / (bps * seconds / 1e9), read_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    build()
    rows = {True: [], False: []}
    for run in range(args.runs):
        for observe in ((True, False) if run % 2 == 0 else (False, True)):
            bps, cpu, read_ms = one(args.time, observe)
            rows[observe].append((bps, cpu, read_ms))
            print(f"  run {run + 1} {'observe' if observe else 'no-observe':10s} {bps / 1e9:6.2f} Gbit/s "
                  f"{cpu:.4f} CPU s/Gbit  readings {read_ms:.2f} ms", file=sys.stderr)
    med = lambda observe, i: statistics.median(r[i] for r in rows[observe])
    print(f"TCP loopback, 1 flow, median of {args.runs} x {args.time} s, interleaved")
    print(f"{'':12s} {'Gbit/s':>8s} {'CPU s/Gbit':>11s} {'readings ms (both ends)':>24s}")
    for observe in (True, False):
        print(f"{'observe' if observe else 'no-observe':12s} {med(observe, 0) / 1e9:8.2f} {med(observe, 1):11.4f} "
              f"{med(observe, 2):24.2f}")
    print(f"observe / no-observe: goodput {med(True, 0) / med(False, 0):.3f}, CPU per Gbit "
          f"{med(True, 1) / med(False, 1):.3f}; readings take {med(True, 2) / (args.time * 1e3) * 100:.3f} % "
          f"of the window on the measuring threads")


if __name__ == "__main__":
    main()
