#!/usr/bin/env python3
"""The store's write rate and size: results a second that one coordinator's writer keeps
(crates/store/examples/write_rate.rs: the writer thread, a compact document a result,
the coordinator waiting for the run ids), into SQLite on this machine's disk and into
Debian's PostgreSQL on loopback (fsync and synchronous_commit as shipped), interleaved;
and the SQLite file's bytes a result. Three ways a result arrives, each round:

- alone: every result handed over alone and waited for (a transaction each);
- offered: jobs ending at --offered a second, the coordinator storing those that ended
  together in one transaction (as the mesh does): kept up with when the results a second
  match the offer and the wait from a job's end to its row stays short;
- all at once: every job already ended, batches of 256: the most the store takes.

    python3 bench/store.py                  # 3 rounds of 20,000 results each
    python3 bench/store.py --rows 50000 --runs 5 --offered 3000

Needs root for PostgreSQL (it runs as its own user from a directory of its own here);
without it, SQLite only, said so.
"""
import argparse, glob, json, os, shutil, statistics, subprocess, sys, tempfile, time

from common import ROOT, start_postgres

EXAMPLE = os.path.join(ROOT, "target", "release", "examples", "write_rate")
PORT = "54331"


MODES = ("alone", "offered", "all at once")


def write_rate(kind, place, rows, mode="alone", offered=2000):
    extra = {"alone": [], "offered": [str(offered)], "all at once": ["0"]}[mode]
    out = subprocess.run([EXAMPLE, kind, place, str(rows), *extra], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--offered", type=int, default=2000,
                   help="jobs ending a second in the offered mode (the target: 2,000)")
    a = p.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "linerate-store",
                    "--example", "write_rate"], cwd=ROOT, check=True)
    print("cpu:", subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo"],
                                 capture_output=True, text=True).stdout.split(":")[-1].strip())
    work = tempfile.mkdtemp(prefix="linerate-store-bench-", dir="/var/tmp")
    pg_work = tempfile.mkdtemp(prefix="linerate-store-pg-")
    server, url, _ = start_postgres(pg_work, PORT)
    if url is None:
        print("PostgreSQL: not measured (needs root and Debian's postgresql)")
    rates = {(kind, mode): [] for kind in ("sqlite", "postgres") for mode in MODES}
    waits = {key: [] for key in rates}
    sizes = []
    try:
        for run in range(a.runs):
            for mode in MODES:
                db = os.path.join(work, f"results-{run}-{mode.replace(' ', '-')}.db")
                places = [("sqlite", db)] + ([("postgres", url)] if url else [])
                for kind, place in places:
                    r = write_rate(kind, place, a.rows, mode, a.offered)
                    rates[(kind, mode)].append(r["rows_per_s"])
                    wait = r.get("wait_s") or {}
                    if wait:
                        waits[(kind, mode)].append(wait["p99"])
                    line = (f"round {run + 1}: {kind:8} {mode:10} {r['rows_per_s']:7,.0f} "
                            f"results/s, mean batch {r['mean_batch']:6.1f}")
                    if wait:
                        line += (f", wait end-to-stored p50 {wait['p50'] * 1e3:.1f} ms, "
                                 f"p99 {wait['p99'] * 1e3:.1f} ms, max {wait['max'] * 1e3:.1f} ms")
                    if kind == "sqlite" and mode == "alone":
                        size = sum(os.path.getsize(f) for f in glob.glob(db + "*"))
                        sizes.append(size / a.rows)
                        line += f", {size / a.rows:,.0f} B a result ({r['document_bytes']} B document)"
                    print(line, flush=True)
    finally:
        if server:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(pg_work, ignore_errors=True)
    for (kind, mode), values in rates.items():
        if values:
            offer = f" (offered {a.offered:,}/s)" if mode == "offered" else ""
            p99 = (f", p99 wait median {statistics.median(waits[(kind, mode)]) * 1e3:.1f} ms"
                   if waits[(kind, mode)] else "")
            print(f"{kind} {mode}{offer}: median {statistics.median(values):,.0f} results/s "
                  f"(min {min(values):,.0f}, max {max(values):,.0f}) over {len(values)} rounds "
                  f"of {a.rows:,}{p99}")
    print(f"sqlite: {statistics.median(sizes):,.0f} bytes a result (row, run, document, indexes)")


if __name__ == "__main__":
    sys.exit(main())
