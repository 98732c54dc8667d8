#!/usr/bin/env python3
"""Reading a mesh's store at ten million rows: `mesh status`, a pair's 30-day `mesh
history`, the `history` listing and a restarted coordinator's grid (`/api/grid`, 100
hosts), timed over a SQLite results database seeded with --rows mesh rows (and a run for
one row in ten), and over Debian's PostgreSQL seeded alike when root; with the size a
million rows take.

The rows are written by SQL in bulk (the store's own writer would take an hour and a half
for ten million at 2,000 a second, bench/store.py): 100 hosts, two tests (lat, tput),
every ordered pair, spread evenly over --days, each pair's newest in the latest table as
the writer keeps it. Each command runs --repeat times; the medians are printed beside
`linerate --version`'s, the cost of starting the process.

    python3 bench/store_scale.py                       # 10,000,000 rows, SQLite (+ PostgreSQL as root)
    python3 bench/store_scale.py --rows 1000000 --no-postgres
"""
import argparse, json, os, shutil, sqlite3, statistics, subprocess, sys, tempfile, time
import urllib.request

from common import ROOT, free_port, start_postgres

BIN = os.path.join(ROOT, "target", "release", "linerate")
WRITE_RATE = os.path.join(ROOT, "target", "release", "examples", "write_rate")
HOSTS, TESTS = 100, ("lat", "tput")
PAIRS = HOSTS * (HOSTS - 1) * len(TESTS)
PG_PORT = "54332"

# Pair p (0 <= p < PAIRS): its test, its source and its destination, in SQL over `p`.
PAIR_SQL = {
    "test": "CASE WHEN p % 2 = 0 THEN 'lat' ELSE 'tput' END",
    "src": "'h' || ((p / 2) / 99)",
    "dst": "'h' || (((p / 2) / 99 + 1 + (p / 2) % 99) % 100)",
}


def timed(argv, repeat, env=None):
    """Median wall seconds of `argv` over `repeat` runs, and its last output."""
    took, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, env=env)
        took.append(time.perf_counter() - t0)
        if out.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed: {out.stderr.strip()}")
    return statistics.median(took), out.stdout


def seed_sqlite(db, rows, days):
    """The schema by the store itself, then the rows in bulk."""
    subprocess.run([WRITE_RATE, "sqlite", db, "1"], check=True, capture_output=True)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -1000000")
    now = time.time()
    per_pair = max(rows // PAIRS, 1)
    step = days * 86400.0 / per_pair
    t0 = now - days * 86400.0
    started = time.time()
    conn.execute("BEGIN")
    # One run for each tenth row, inserted first so the rows can name them.
    conn.execute(f"""
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 10 FROM n WHERE i + 10 < {rows})
        INSERT INTO runs (id, started_at, stored_at, test, target, headline, headline_text,
                          document, kind, command, path)
        SELECT 1000000000 + i, {t0} + (i / {PAIRS}) * {step}, {now}, 'stream', 'h1 -> h2',
               1.0, '1.00 ms', '{{}}', 'stream', 'mesh big', 'direct' FROM n""")
    conn.execute(f"""
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {rows}),
        q(i, p, k) AS (SELECT i, i % {PAIRS}, i / {PAIRS} FROM n)
        INSERT INTO mesh_results (run_id, mesh, src, dst, test, direction, protocol, cycle,
                                  started_at, ended_at, ok, reason, headline, headline_text,
                                  outcome, blamed, job_key)
        SELECT CASE WHEN i % 10 = 0 THEN 1000000000 + i END, 'big', {PAIR_SQL['src']},
               {PAIR_SQL['dst']}, {PAIR_SQL['test']}, 'forward', 'tcp', k,
               {t0} + k * {step} + p * {step} / {PAIRS}, {t0} + k * {step} + p * {step} / {PAIRS} + 1,
               1, '', 0.001 + (i % 7) * 1e-4, '1.00 ms', 'ok', NULL, 'big/' || p || '/' || k
        FROM q""")
    conn.execute("""
        INSERT OR REPLACE INTO mesh_latest (mesh, src, dst, test, result_id, started_at)
        SELECT mesh, src, dst, test, id, MAX(started_at) FROM mesh_results
        WHERE mesh = 'big' GROUP BY mesh, src, dst, test""")
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.time() - started


def seed_postgres(url, psql, rows, days):
    subprocess.run([WRITE_RATE, "postgres", url, "1"], check=True, capture_output=True)
    now = time.time()
    per_pair = max(rows // PAIRS, 1)
    step = days * 86400.0 / per_pair
    t0 = now - days * 86400.0
    sql = f"""
        BEGIN;
        INSERT INTO linerate_runs (id, started_at, stored_at, test, kind, target, headline,
                                   headline_text, command, path, document)
        SELECT 1000000000 + i, {t0} + (i / {PAIRS}) * {step}, {now}, 'stream', 'stream',
               'h1 -> h2', 1.0, '1.00 ms', 'mesh big', 'direct', '{{}}'
        FROM generate_series(0, {rows - 1}, 10) AS i;
        INSERT INTO linerate_mesh_results (run_id, mesh, src, dst, test, direction, protocol,
            cycle, started_at, ended_at, ok, reason, headline, headline_text, outcome, blamed,
            job_key)
        SELECT CASE WHEN i % 10 = 0 THEN 1000000000 + i END, 'big', {PAIR_SQL['src']},
               {PAIR_SQL['dst']}, {PAIR_SQL['test']}, 'forward', 'tcp', k,
               {t0} + k * {step} + p * {step} / {PAIRS}, {t0} + k * {step} + p * {step} / {PAIRS} + 1,
               true, '', 0.001 + (i % 7) * 1e-4, '1.00 ms', 'ok', NULL, 'big/' || p || '/' || k
        FROM (SELECT i, i % {PAIRS} AS p, i / {PAIRS} AS k
              FROM generate_series(0::BIGINT, {rows - 1}) AS i) AS q;
        INSERT INTO linerate_mesh_latest (mesh, src, dst, test, result_id, started_at,
            run_id, direction, protocol, cycle, ended_at, outcome, reason, blamed, headline,
            headline_text)
        SELECT DISTINCT ON (mesh, src, dst, test) mesh, src, dst, test, id, started_at,
            run_id, direction, protocol, cycle, ended_at, outcome, reason, blamed, headline,
            headline_text
        FROM linerate_mesh_results WHERE mesh = 'big'
        ORDER BY mesh, src, dst, test, started_at DESC, id DESC
        ON CONFLICT (mesh, src, dst, test) DO UPDATE SET result_id = EXCLUDED.result_id,
            started_at = EXCLUDED.started_at, run_id = EXCLUDED.run_id,
            direction = EXCLUDED.direction, protocol = EXCLUDED.protocol,
            cycle = EXCLUDED.cycle, ended_at = EXCLUDED.ended_at, outcome = EXCLUDED.outcome,
            reason = EXCLUDED.reason, blamed = EXCLUDED.blamed, headline = EXCLUDED.headline,
            headline_text = EXCLUDED.headline_text;
        COMMIT;
    """
    started = time.time()
    for statement in (sql, "VACUUM ANALYZE"):
        done = subprocess.run([psql, url, "-q", "-v", "ON_ERROR_STOP=1", "-c", statement],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"seeding PostgreSQL failed: {done.stderr.strip()}")
    size = subprocess.run([psql, url, "-At", "-c", "SELECT pg_database_size(current_database())"],
                          check=True, capture_output=True, text=True).stdout.strip()
    return time.time() - started, int(size)


def grid(store_args, work, repeat):
    """A coordinator over the seeded mesh (its hosts' ports closed: each job fails and
    its host is skipped), started with --metrics: seconds until its board holds the
    past and it starts, its RSS then, the median time of /api/grid and its host count."""
    key = os.path.join(work, "key")
    with open(key, "w") as f:
        f.write("the scale benchmark's key, long enough\n")
    lines = ['name = "big"']
    for h in range(HOSTS):
        lines.append(f'[[host]]\nname = "h{h}"\naddress = "127.0.0.1:{1 + h}"')
    lines.append('[[test]]\nname = "lat"\nrun = "rr"\nduration = "1s"\ninterval = "1h"')
    lines.append('[[test]]\nname = "tput"\nrun = "stream"\nduration = "1s"\ninterval = "1h"')
    lines.append('[[group]]\nname = "all"\ntests = ["lat", "tput"]')
    mesh = os.path.join(work, "big.toml")
    with open(mesh, "w") as f:
        f.write("\n".join(lines) + "\n")
    port = free_port()
    t0 = time.time()
    coordinator = subprocess.Popen([BIN, "mesh", "run", mesh, "--key", key,
                                    "--metrics", f"127.0.0.1:{port}", *store_args],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/api/grid"
        # The grid is served at once and fills as the past is read; the coordinator says
        # "Mesh 'big': ..." once its board holds every pair's past and it starts.
        for line in coordinator.stderr:
            if line.startswith("Mesh 'big'"):
                break
        else:
            sys.exit("the coordinator ended before it started")
        ready = time.time() - t0
        took = []
        for _ in range(repeat):
            t = time.perf_counter()
            body = urllib.request.urlopen(url, timeout=30).read()
            took.append(time.perf_counter() - t)
        hosts = len(json.loads(body).get("hosts", []))
        rss = int(open(f"/proc/{coordinator.pid}/status").read().split("VmRSS:")[1].split()[0])
        return ready, statistics.median(took), hosts, rss / 1024
    finally:
        coordinator.terminate()
        try:
            coordinator.wait(timeout=15)
        except subprocess.TimeoutExpired:
            coordinator.kill()
            coordinator.wait()


def measure(label, store_args, work, repeat, base):
    # The store's flags after the subcommand: `--store` is a flag of the mesh's commands.
    status, out = timed([BIN, "mesh", "status", "big", "--json", *store_args], repeat)
    pairs = len(json.loads(out)) if out.strip().startswith("[") else None
    history, out = timed([BIN, "mesh", "history", "big", "h1", "h2", "--test", "lat",
                          "--since", "30d", "--json", *store_args], repeat)
    # `history` lists the results database's runs (a PostgreSQL archive has no listing).
    listing = timed([BIN, "history", *store_args], repeat)[0] if label == "sqlite" else None
    ready, api, hosts, rss = grid(store_args, work, repeat)
    print(f"{label}: mesh status {status * 1e3:.0f} ms ({pairs} pairs), "
          f"30-day pair history {history * 1e3:.0f} ms"
          + (f", history listing {listing * 1e3:.0f} ms" if listing is not None else "")
          + f"; coordinator restart serving its grid after {ready:.1f} s ({rss:.0f} MiB), "
          f"/api/grid {api * 1e3:.1f} ms ({hosts} hosts); process start {base * 1e3:.0f} ms",
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--days", type=float, default=35.0)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--no-sqlite", action="store_true")
    a = p.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "linerate"], cwd=ROOT,
                   check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "linerate-store",
                    "--example", "write_rate"], cwd=ROOT, check=True)
    print("cpu:", subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo"],
                                 capture_output=True, text=True).stdout.split(":")[-1].strip())
    print(f"{a.rows:,} mesh rows: {HOSTS} hosts, {PAIRS:,} pairs, over {a.days:g} days; "
          f"a run for one row in ten", flush=True)
    base, _ = timed([BIN, "--version"], a.repeat)
    work = tempfile.mkdtemp(prefix="linerate-scale-", dir="/var/tmp")
    pg_work = tempfile.mkdtemp(prefix="linerate-scale-pg-")
    server = None
    try:
        if not a.no_sqlite:
            db = os.path.join(work, "big.db")
            took = seed_sqlite(db, a.rows, a.days)
            size = os.path.getsize(db)
            print(f"sqlite: seeded in {took:.0f} s; {size / 2**30:.2f} GiB, "
                  f"{size / (a.rows / 1e6) / 2**20:.0f} MiB a million rows (rows, their runs "
                  f"with an empty document, indexes)", flush=True)
            measure("sqlite", ["--db", db], work, a.repeat, base)
            os.remove(db)
        if not a.no_postgres:
            server, url, bin_dir = start_postgres(pg_work, PG_PORT, "shared_buffers=1GB",
                                                  "max_wal_size=8GB")
            if not url:
                print("postgres: not measured (needs root and Debian's postgresql)")
                return
            psql = os.path.join(bin_dir, "psql")
            took, size = seed_postgres(url, psql, a.rows, a.days)
            print(f"postgres: seeded in {took:.0f} s; database {size / 2**30:.2f} GiB, "
                  f"{size / (a.rows / 1e6) / 2**20:.0f} MiB a million rows", flush=True)
            measure("postgres", ["--no-store", "--store", url], work, a.repeat, base)
    finally:
        if server:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(pg_work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
