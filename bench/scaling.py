#!/usr/bin/env python3
"""Flow scaling on loopback: linerate at 1, 8, 100, 1000 and 4000 TCP flows.

A separate `linerate serve` process and a client process; --runs rounds, each running
every flow count for --time seconds in turn (in reverse order every other round). Prints
the median receiver goodput, the CPU of each side's own threads, the system-wide busy
share, the peak resident memory of each process, and goodput relative to 8 flows.

    python3 bench/scaling.py
    python3 bench/scaling.py --flows 1,8,1000 --runs 1 --time 10
    python3 bench/scaling.py --tls --flows 1,1000,4000   each count plain, then through TLS

With --tls every flow count runs twice in each round, plain and then with --tls, and the
table gives both: what TLS adds to each side's memory and CPU at that count.

Needs GNU time (/usr/bin/time, installed when run as root).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

from common import LINERATE, build, free_port


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def one(flows, seconds, length, tls=False):
    # A fresh server per point, so its peak RSS belongs to this flow count.
    port = free_port()
    server = subprocess.Popen([LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        # GNU time reports the client's own peak RSS. A wait4 from here would not: a
        # child's peak carries over its exec from the process that forked it, and this
        # script outgrows a small client.
        with tempfile.NamedTemporaryFile("r") as peak:
            client = subprocess.run(
                ["/usr/bin/time", "-f", "%M", "-o", peak.name,
                 LINERATE, "stream", "127.0.0.1", "-p", str(port), "-P", str(flows),
                 "-t", str(seconds), "-l", length, "-i", "0", "--json", "--no-store"]
                + (["--tls"] if tls else []),
                capture_output=True, text=True)
            out, err = client.stdout, client.stderr
            client_rss = int(peak.read().split()[-1]) if client.returncode == 0 else 0
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
    parser.add_argument("--tls", action="store_true",
                        help="run every count plain and through TLS, side by side")
    args = parser.parse_args()
    if not os.path.exists("/usr/bin/time") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", "time"], check=False,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if not os.path.exists("/usr/bin/time"):
        sys.exit("bench/scaling.py needs GNU time for the client's peak RSS: apt-get install time")
    build()
    counts = [int(x) for x in args.flows.split(",")]
    modes = [False, True] if args.tls else [False]
    if args.tls:
        # Each point is a (count, TLS) pair; ratios stay against plain 8 flows.
        counts = [(n, tls) for n in counts for tls in modes]
    else:
        counts = [(n, False) for n in counts]
    # Rounds of every flow count in turn, so that the machine's drift (10-30 % over
    # minutes) falls on every count alike; each count is compared with 8 flows of the
    # same round, and the table gives the median of those ratios. Every other round runs
    # the counts in reverse, so a steady drift favours none of them.
    results = {n: [] for n in counts}
    ratios = {n: [] for n in counts}
    for r in range(args.runs):
        round_bps = {}
        for n in counts if r % 2 == 0 else counts[::-1]:
            label = f"{n[0]} flows{' TLS' if n[1] else ''}"
            try:
                result = one(n[0], args.time, args.length, n[1])
                results[n].append(result)
                round_bps[n] = result["bps"]
                print(f"  round {r + 1}, {label}: {result['bps'] / 1e9:.2f} Gbit/s", file=sys.stderr)
            except Exception as error:
                print(f"  round {r + 1}, {label} failed: {error}", file=sys.stderr)
        if round_bps.get((8, False)):
            for n, bps in round_bps.items():
                ratios[n].append(bps / round_bps[(8, False)])
    rows = {}
    for n, runs in results.items():
        if runs:
            rows[n] = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
            # Peak memory: the worst run, not the median.
            rows[n]["client_rss"] = max(x["client_rss"] for x in runs)
            rows[n]["server_rss"] = max(x["server_rss"] for x in runs)
            rows[n]["ratio"] = statistics.median(ratios[n]) if ratios[n] else None
    print(f"TCP loopback scaling, {args.length} writes, median of {args.runs} rounds x {args.time} s"
          " ('vs 8': median of each round's ratio to its plain 8-flow run)")
    print(f"{'flows':>6s} {'tls':>4s} {'Gbit/s':>8s} {'vs 8':>6s} {'failed':>7s} {'client%':>8s} {'server%':>8s} "
          f"{'busy%':>6s} {'client MiB':>11s} {'server MiB':>11s}")
    for n, row in rows.items():
        ratio = f"{row['ratio']:6.2f}" if row["ratio"] is not None else "     -"
        print(f"{n[0]:6d} {'yes' if n[1] else 'no':>4s} {row['bps'] / 1e9:8.2f} {ratio} {row['failed']:7.0f} {row['client_cpu']:8.1f} "
              f"{row['server_cpu']:8.1f} {row['busy']:6.1f} {row['client_rss'] / 1024:11.1f} "
              f"{row['server_rss'] / 1024:11.1f}")


if __name__ == "__main__":
    main()
