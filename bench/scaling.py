#!/usr/bin/env python3
"""Flow scaling on loopback: linerate at 1, 8, 100, 1000 and 4000 TCP flows.

A separate `linerate serve` process and a client process; for each flow count, --runs
tests of --time seconds. Prints the median receiver goodput, the CPU of each side's own
threads, the system-wide busy share, the peak resident memory of each process, and
goodput relative to 8 flows.

    python3 bench/scaling.py
    python3 bench/scaling.py --flows 1,8,1000 --runs 1 --time 10
"""
import argparse, json, os, statistics, subprocess, sys, time

from common import LINERATE, build, free_port


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def one(flows, seconds, length):
    # A fresh server per point, so its peak RSS belongs to this flow count.
    port = free_port()
    server = subprocess.Popen([LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        client = subprocess.Popen(
            [LINERATE, "stream", "127.0.0.1", "-p", str(port), "-P", str(flows), "-t", str(seconds),
             "-l", length, "-i", "0", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = client.stdout.read()
        err = client.stderr.read()
        # wait4 gives this one child's peak RSS (RUSAGE_CHILDREN would include the build).
        _, status, usage = os.wait4(client.pid, 0)
        client.returncode = os.waitstatus_to_exitcode(status)
        client_rss = usage.ru_maxrss
        server_rss = peak_rss_kib(server.pid)
        if client.returncode != 0:
            raise RuntimeError(err.strip()[:300])
        doc = json.loads(out)
        s = doc["summary"]
        return {
            "bps": s["receiver_bps"],
            "failed": s["flows_failed"],
            "client_cpu": s["cpu"]["local"]["process_pct"],
            "server_cpu": s["cpu"]["remote"]["process_pct"],
            "busy": s["cpu"]["local"]["busy_pct"],
            "client_rss": client_rss,
            "server_rss": server_rss,
        }
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flows", default="1,8,100,1000,4000")
    parser.add_argument("--time", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--length", default="128K")
    args = parser.parse_args()
    build()
    counts = [int(x) for x in args.flows.split(",")]
    rows = {}
    for n in counts:
        runs = []
        for r in range(args.runs):
            try:
                runs.append(one(n, args.time, args.length))
                print(f"  {n} flows run {r + 1}: {runs[-1]['bps'] / 1e9:.2f} Gbit/s", file=sys.stderr)
            except Exception as error:
                print(f"  {n} flows run {r + 1} failed: {error}", file=sys.stderr)
        if runs:
            rows[n] = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
            # Peak memory: the worst run, not the median.
            rows[n]["client_rss"] = max(x["client_rss"] for x in runs)
            rows[n]["server_rss"] = max(x["server_rss"] for x in runs)
    base = rows.get(8, {}).get("bps")
    print(f"TCP loopback scaling, {args.length} writes, median of {args.runs} x {args.time} s")
    print(f"{'flows':>6s} {'Gbit/s':>8s} {'vs 8':>6s} {'failed':>7s} {'client%':>8s} {'server%':>8s} "
          f"{'busy%':>6s} {'client MiB':>11s} {'server MiB':>11s}")
    for n, row in rows.items():
        ratio = f"{row['bps'] / base:6.2f}" if base else "     -"
        print(f"{n:6d} {row['bps'] / 1e9:8.2f} {ratio} {row['failed']:7.0f} {row['client_cpu']:8.1f} "
              f"{row['server_cpu']:8.1f} {row['busy']:6.1f} {row['client_rss'] / 1024:11.1f} "
              f"{row['server_rss'] / 1024:11.1f}")


if __name__ == "__main__":
    main()
