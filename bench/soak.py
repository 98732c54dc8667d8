#!/usr/bin/env python3
"""An accelerated soak: a mesh of 20 hosts (network namespaces on two bridges), a light rr
probe of every pair once a minute (6 jobs a second over 380 pairs) and a 1 s exclusive
stream of every pair every 2 minutes, with `--metrics` scraped every 10 s, for
--minutes (30 by default). The coordinator's and one agent's resident memory, threads and
open descriptors are sampled every 10 s.

Printed: a straight-line fit of each process's RSS over time after the first 5 minutes
(MiB an hour: the bound is 1 MiB/h), and, for threads and descriptors, the baseline
(the fewest seen after the first 5 minutes) against the fewest in each 2-minute window:
a process that leaks a thread or a descriptor a cycle drifts above its baseline window
by window. Rows stored and failed jobs beside them.

    sudo python3 bench/soak.py                  # 30 minutes
    sudo python3 bench/soak.py --minutes 120 --hosts 20

Needs root, iproute2 and ethtool (installed with apt-get when missing).
"""
import argparse, os, shutil, sqlite3, subprocess, sys, tempfile, time, urllib.request

from common import LINERATE, build, free_port
from mesh import PORT, Topology, cpu_model, sh, wait_listening


def test_connections(pid):
    """How many of `pid`'s descriptors are TCP connections to or from the agents' port: a
    job's control and data connections, which come and go with the jobs in flight. The
    descriptors besides them are what must stay at a baseline."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            ports = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
            if state != "0A" and PORT in ports:  # 0A: listening
                inodes.add(inode)
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            held += 1
    return held


def sample(pid):
    """RSS (MiB), threads, open descriptors of `pid`, and the RSS's parts (MiB): anonymous
    memory (the heap, stacks), file pages (the binary's code as it is first run, mapped
    files) and shared memory (SQLite's WAL index); then the descriptors that are test
    connections (`test_connections`)."""
    status = open(f"/proc/{pid}/status").read()
    field = lambda name: int(status.split(f"{name}:")[1].split()[0])
    parts = tuple(field(name) / 1024 for name in ("RssAnon", "RssFile", "RssShmem"))
    return ((field("VmRSS") / 1024, field("Threads"), len(os.listdir(f"/proc/{pid}/fd")))
            + parts + (test_connections(pid),))


def find_process(unique_argument, timeout_s=30.0):
    """The pid of the process whose command line holds `unique_argument` (the coordinator
    under a wrapper such as heaptrack, which starts it as a child)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if os.path.basename(exe) == "linerate" and unique_argument.encode() in argv:
                return int(pid)
        time.sleep(0.2)
    sys.exit(f"no linerate process with {unique_argument} on its command line")


def fit(points):
    """Least-squares slope of (t, y) points, y per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / den * 3600 if den else 0.0


def mesh_text(topo, key):
    text = f'name = "soak"\nkey = "{key}"\n'
    for i, addr in enumerate(topo.addrs):
        text += f'[[host]]\nname = "h{i}"\naddress = "{addr}:{PORT}"\n'
    text += """
[[test]]
name = "tput"
run = "stream"
duration = "1s"
interval = "2m"

[[test]]
name = "lat"
run = "rr"
rate = "10/s"
duration = "1s"
interval = "1m"

[[group]]
name = "all"
tests = ["tput", "lat"]
"""
    return text


def report(label, samples, warmup_s, window_s):
    after = [(t, s) for t, s in samples if t >= warmup_s]
    if len(after) < 2:
        print(f"{label}: too few samples after the warm-up")
        return
    rss_fit = fit([(t, s[0]) for t, s in after])
    rss = [s[0] for _, s in after]
    print(f"{label}: RSS {min(rss):.1f}-{max(rss):.1f} MiB after {warmup_s / 60:.0f} min, "
          f"fit {rss_fit:+.2f} MiB/hour (bound 1)")
    # Whether the RSS levels off: the same fit over each half of what followed the warm-up.
    middle = after[len(after) // 2][0]
    halves = [[(t, s[0]) for t, s in after if t < middle], [(t, s[0]) for t, s in after if t >= middle]]
    print(f"  fit over the first half {fit(halves[0]):+.2f}, over the second half "
          f"{fit(halves[1]):+.2f} MiB/hour (from {middle / 60:.0f} min)")
    parts = []
    for index, name in ((3, "anonymous"), (4, "file"), (5, "shared")):
        values = [s[index] for _, s in after]
        parts.append(f"{name} {min(values):.1f}-{max(values):.1f} MiB, "
                     f"fit {fit([(t, s[index]) for t, s in after]):+.2f} MiB/hour")
    print("  of which " + "; ".join(parts))
    # The descriptors besides the jobs' connections: a descriptor leaked a cycle shows
    # here even while jobs overlap without a pause.
    counted = ((lambda s: s[1], "threads"), (lambda s: s[2], "descriptors"),
               (lambda s: s[2] - s[6], "descriptors besides test connections"))
    for value, name in counted:
        base = min(value(s) for _, s in after)
        windows = {}
        for t, s in after:
            key = int((t - warmup_s) // window_s)
            windows[key] = min(windows.get(key, value(s)), value(s))
        lows = [windows[k] for k in sorted(windows)]
        highs = max(value(s) for _, s in after)
        print(f"  {name}: baseline {base}, the fewest in each {window_s / 60:.0f}-minute window "
              f"{lows} (most seen {highs}); above the baseline at the end: {lows[-1] - base}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--wrap", default="",
                    help="a command the coordinator runs under, e.g. 'heaptrack -o /tmp/coord'")
    ap.add_argument("--samples", default="",
                    help="a CSV file for every sample (seconds, process, RSS MiB, threads, fds, "
                         "anonymous, file, shared MiB, test connections)")
    ap.add_argument("--binary", default="",
                    help="a linerate binary to soak (e.g. one built with --features jemalloc) "
                         "instead of building target/release/linerate")
    ap.add_argument("--no-metrics", action="store_true",
                    help="run the coordinator without --metrics (to split its parts)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/soak.py needs root (network namespaces)")
    if not shutil.which("ethtool"):
        subprocess.run(["apt-get", "install", "-y", "ethtool"], check=True, capture_output=True)
    linerate = args.binary or LINERATE
    if not args.binary:
        build()
    print(f"cpu: {cpu_model()}, {os.cpu_count()} CPUs; {args.hosts} hosts, "
          f"{args.minutes:g} minutes; {linerate}"
          + (f", MALLOC_CONF={os.environ['MALLOC_CONF']}" if os.environ.get("MALLOC_CONF") else ""),
          flush=True)
    work = tempfile.mkdtemp(prefix="linerate-soak-")
    key = os.path.join(work, "mesh.key")
    with open(key, "w") as f:
        f.write("the soak's key, for its own agents only\n")
    topo = Topology(args.hosts, f"lsk{os.getpid() % 1000}")
    coordinator = None
    try:
        topo.build()
        # The two sites joined by a plain bridge (no emulator: the soak is about the
        # coordinator and the agents, not the path).
        sh("ip", "-n", topo.wan, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", topo.wan, "link", "set", "br0", "up")
        for side in ("w", "e"):
            sh("ip", "-n", topo.wan, "link", "set", f"{topo.tag}{side}", "master", "br0")
        log = open(os.path.join(work, "agents.log"), "w")
        agents = [topo.spawn(ns, [linerate, "serve", "--no-store", "--key", key, "--listen",
                                  addr, "--port", str(PORT)], log)
                  for ns, addr in zip(topo.hosts, topo.addrs)]
        deadline = time.time() + 30
        for ns, addr in zip(topo.hosts, topo.addrs):
            if not wait_listening(ns, addr, deadline):
                sys.exit(f"the agent in {ns} did not start (see {work}/agents.log)")
        path = os.path.join(work, "soak.toml")
        with open(path, "w") as f:
            f.write(mesh_text(topo, key))
        db = os.path.join(work, "results.db")
        metrics_port = free_port()
        coord_log = open(os.path.join(work, "coordinator.log"), "w")
        command = ["ip", "netns", "exec", topo.coord, *args.wrap.split(), linerate, "--db", db,
                   "mesh", "run", path]
        if not args.no_metrics:
            command += ["--metrics", f"127.0.0.1:{metrics_port}"]
        coordinator = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=coord_log)
        coordinator_pid = find_process(db) if args.wrap else coordinator.pid
        started = time.time()
        end = started + args.minutes * 60
        coord_samples, agent_samples = [], []
        scrape_failures = 0
        next_print = started + 60
        while time.time() < end:
            if coordinator.poll() is not None:
                sys.exit(f"the coordinator ended ({coordinator.returncode}); see {work}")
            t = time.time() - started
            coord_samples.append((t, sample(coordinator_pid)))
            agent_samples.append((t, sample(agents[0].pid)))
            try:
                if not args.no_metrics:
                    sh("ip", "netns", "exec", topo.coord, "curl", "-sf", "-o", "/dev/null",
                       f"http://127.0.0.1:{metrics_port}/metrics")
            except subprocess.CalledProcessError:
                scrape_failures += 1
            if time.time() >= next_print:
                next_print += 60
                c, a = coord_samples[-1][1], agent_samples[-1][1]
                print(f"{t / 60:5.1f} min: coordinator {c[0]:.1f} MiB, {c[1]} threads, "
                      f"{c[2]} fds; agent h0 {a[0]:.1f} MiB, {a[1]} threads, {a[2]} fds",
                      flush=True)
            time.sleep(max(0.0, args.every - (time.time() - started - t)))
        wall = time.time() - started
        if args.samples:
            with open(args.samples, "w") as out:
                out.write("seconds,process,rss_mib,threads,fds,anon_mib,file_mib,shared_mib,test_connections\n")
                for label, samples in (("coordinator", coord_samples), ("agent", agent_samples)):
                    for t, s in samples:
                        out.write(f"{t:.1f},{label}," + ",".join(f"{v:.3f}" if isinstance(v, float)
                                                                    else str(v) for v in s) + "\n")
        # The coordinator itself (not a wrapper, which may not pass the signal on).
        os.kill(coordinator_pid, 2)
        coordinator.wait(timeout=30)
        with sqlite3.connect(db) as conn:
            counts = dict(conn.execute(
                "SELECT outcome, COUNT(*) FROM mesh_results GROUP BY outcome").fetchall())
        print(f"\n{wall / 60:.1f} minutes, {len(coord_samples)} samples every {args.every:g} s; "
              f"rows stored by outcome {counts}; /metrics scrapes that failed: {scrape_failures}")
        warmup = min(300.0, wall / 3)
        report("coordinator", coord_samples, warmup, 120.0)
        report("agent h0", agent_samples, warmup, 120.0)
    finally:
        if coordinator and coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
        topo.remove()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
