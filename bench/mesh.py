#!/usr/bin/env python3
"""A real mesh: 12 hosts as network namespaces at two sites joined by an emulated WAN
(`linerate impair`), a coordinator running `linerate mesh run` for N cycles of a 2 s
throughput test in exclusive slots with a paced rr probe running all the time beside it.

    sudo python3 bench/mesh.py                     # 12 hosts, 3 cycles, WAN 5 ms each way, 1 Gbit/s
    sudo python3 bench/mesh.py --hosts 8 --cycles 2 --delay 10ms --rate 500M

Topology: hosts h0..h5 on the "west" bridge, h6..h11 on the "east" bridge, one /24; the
bridges meet through a router namespace whose two interfaces `linerate impair` bridges
with the WAN's delay and rate. Half the pairs cross the WAN, half stay in their site.
The coordinator is a namespace of its own on the west bridge.

Checked from the results database the coordinator wrote (the stored start and end of
every job, which include its set-up):
- no two exclusive jobs sharing a host overlap in time;
- every ordered pair measured (ok) in every cycle;
- each cycle's length against the plan (`linerate mesh plan --json`); the issue's bound
  is 1.2x.
Truth beside the figures: the bytes the destinations' documents say crossed the WAN
against the frames the emulator forwarded (its own status file), and the rr probe's
median round trip across the WAN against the emulator's configured delay.

Needs root, iproute2 and ethtool (installed with apt-get when missing).
"""
import argparse, json, os, platform, shutil, sqlite3, statistics, subprocess, sys, tempfile, time

from common import LINERATE, build

PORT = 5201


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, **kw)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


class Topology:
    def __init__(self, hosts, tag):
        self.tag = tag
        self.hosts = [f"{tag}-h{i}" for i in range(hosts)]
        self.addrs = [f"10.66.0.{i + 1}" for i in range(hosts)]
        self.coord = f"{tag}-coord"
        self.coord_addr = "10.66.0.200"
        self.west, self.east, self.wan = f"{tag}-west", f"{tag}-east", f"{tag}-wan"
        self.made = []
        self.procs = []

    def netns(self, name):
        sh("ip", "netns", "add", name)
        self.made.append(name)

    def attach(self, hub, ns, addr, index):
        outer, inner = f"{self.tag}o{index}", f"{self.tag}i{index}"
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        sh("ip", "link", "set", outer, "netns", hub)
        sh("ip", "link", "set", inner, "netns", ns)
        sh("ip", "-n", hub, "link", "set", outer, "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", inner, "up")
        # Frames of at most one MTU with their checksums filled in: the emulator forwards
        # frames as they are, not GSO bursts or checksums left to the hardware.
        sh("ip", "netns", "exec", ns, "ethtool", "-K", inner, "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off")

    def build(self):
        for hub in (self.west, self.east):
            self.netns(hub)
            sh("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", hub, "link", "set", "br0", "up")
        self.netns(self.wan)
        for side, hub in (("w", self.west), ("e", self.east)):
            sh("ip", "link", "add", f"{self.tag}{side}", "type", "veth", "peer", "name", f"{self.tag}{side}x")
            sh("ip", "link", "set", f"{self.tag}{side}", "netns", self.wan)
            sh("ip", "link", "set", f"{self.tag}{side}x", "netns", hub)
            sh("ip", "-n", hub, "link", "set", f"{self.tag}{side}x", "master", "br0", "up")
            sh("ip", "-n", self.wan, "link", "set", f"{self.tag}{side}", "up")
            sh("ip", "netns", "exec", self.wan, "ethtool", "-K", f"{self.tag}{side}", "gro", "off", "tso", "off", "gso", "off", "tx", "off", "rx", "off")
        half = (len(self.hosts) + 1) // 2
        for i, (ns, addr) in enumerate(zip(self.hosts, self.addrs)):
            self.netns(ns)
            self.attach(self.west if i < half else self.east, ns, addr, i)
        self.netns(self.coord)
        self.attach(self.west, self.coord, self.coord_addr, len(self.hosts))
        return half

    def spawn(self, ns, argv, log):
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def remove(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for ns in reversed(self.made):
            sh("ip", "netns", "del", ns, check=False)


def mesh_file(topo, half, key, name):
    text = f'name = "{name}"\nkey = "{key}"\n'
    for i, addr in enumerate(topo.addrs):
        site = "west" if i < half else "east"
        text += f'[[host]]\nname = "h{i}"\naddress = "{addr}:{PORT}"\nlabels = {{ site = "{site}" }}\n'
    text += """
[[test]]
name = "tput"
run = "stream"
duration = "2s"
interval = "1m"

[[test]]
name = "lat"
run = "rr"
rate = "10/s"
duration = "5s"
interval = "5s"

[[group]]
name = "all"
tests = ["tput", "lat"]
"""
    return text


def wait_listening(ns, addr, deadline):
    while time.time() < deadline:
        out = sh("ip", "netns", "exec", ns, "ss", "-Htln", f"sport = :{PORT}", check=False).stdout
        if out.strip():
            return True
        time.sleep(0.1)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=12)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--delay", default="5ms", help="one-way delay of the WAN, each direction")
    ap.add_argument("--rate", default="1G", help="the WAN's rate, each direction")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/mesh.py needs root (network namespaces)")
    if not shutil.which("ethtool"):
        subprocess.run(["apt-get", "install", "-y", "ethtool"], check=True, capture_output=True)
    build()
    work = tempfile.mkdtemp(prefix="linerate-mesh-bench-")
    key = os.path.join(work, "mesh.key")
    with open(key, "w") as f:
        f.write("the mesh benchmark's key, for its own agents\n")
    topo = Topology(args.hosts, f"lmb{os.getpid() % 1000}")
    try:
        half = topo.build()
        log = open(os.path.join(work, "agents.log"), "w")
        status = os.path.join(work, "wan.json")
        topo.spawn(topo.wan, [LINERATE, "impair", "--between", f"{topo.tag}w", f"{topo.tag}e",
                              "--delay", args.delay, "--rate", args.rate, "--quiet",
                              "--status-file", status, "-t", "3600"], log)
        for ns, addr in zip(topo.hosts, topo.addrs):
            topo.spawn(ns, [LINERATE, "serve", "--no-store", "--key", key, "--listen", addr,
                            "--port", str(PORT)], log)
        deadline = time.time() + 20
        for ns, addr in zip(topo.hosts, topo.addrs):
            if not wait_listening(ns, addr, deadline):
                sys.exit(f"the agent in {ns} did not start (see {work}/agents.log)")
        path = os.path.join(work, "mesh.toml")
        with open(path, "w") as f:
            f.write(mesh_file(topo, half, key, "bench"))
        plan = json.loads(sh(LINERATE, "mesh", "plan", path, "--json").stdout)
        tput_plan = next(t for t in plan["tests"] if t["test"] == "tput")
        db = os.path.join(work, "results.db")
        started = time.time()
        run = sh("ip", "netns", "exec", topo.coord, LINERATE, "--db", db, "mesh", "run", path,
                 "--cycles", str(args.cycles), "--json", check=False)
        wall = time.time() - started
        if run.returncode not in (0, 1):
            sys.exit(f"mesh run failed ({run.returncode}): {run.stderr}")
        time.sleep(1.5)  # the emulator's status file is rewritten every second
        with open(status) as f:
            wan = json.load(f)
        report(args, topo, half, plan, tput_plan, db, wall, wan)
        if wan["directions"][0]["counters"]["passed"] == 0:
            with open(os.path.join(work, "agents.log")) as f:
                print("the emulator forwarded nothing; its log and the agents':\n" + f.read()[-3000:])
    finally:
        topo.remove()
        shutil.rmtree(work, ignore_errors=True)


def forwarded_bytes(wan):
    """Bytes the emulator forwarded, both directions, from its status file."""
    return sum(d["counters"]["passed_bytes"] for d in wan["directions"])


def report(args, topo, half, plan, tput_plan, db, wall, wan):
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT m.src, m.dst, m.test, m.cycle, m.started_at, m.ended_at, m.ok, m.reason, m.headline, r.document"
        " FROM mesh_results m LEFT JOIN runs r ON r.id = m.run_id ORDER BY m.started_at").fetchall()
    site = lambda h: "west" if int(h[1:]) < half else "east"
    tput = [r for r in rows if r[2] == "tput"]
    n = len(topo.hosts)
    pairs = n * (n - 1)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; kernel {platform.release()}")
    print(f"Mesh of {n} hosts ({half} west, {n - half} east), WAN {args.delay} each way at {args.rate}; "
          f"{args.cycles} cycles of a 2 s exclusive stream, rr at 10/s on every pair beside it")
    print(f"Plan: {tput_plan['rounds']} rounds (bound 2(n-1) = {2 * (n - 1)}), cycle {tput_plan['cycle_s']:.1f} s")
    # Overlaps among exclusive jobs that ran.
    ran = [r for r in tput if not r[7].startswith("skipped:")]
    overlaps = 0
    for i, a in enumerate(ran):
        for b in ran[i + 1:]:
            if b[4] >= a[5]:
                continue
            if {a[0], a[1]} & {b[0], b[1]} and a[4] < b[5] and b[4] < a[5]:
                overlaps += 1
    print(f"Exclusive jobs: {len(tput)}, overlaps of jobs sharing a host: {overlaps}")
    worst = 0.0
    for cycle in range(1, args.cycles + 1):
        mine = [r for r in tput if r[3] == cycle]
        measured = {(r[0], r[1]) for r in mine if r[6]}
        span = max(r[5] for r in mine) - min(r[4] for r in mine) if mine else 0.0
        ratio = span / tput_plan["cycle_s"] if tput_plan["cycle_s"] else 0.0
        worst = max(worst, ratio)
        cross = [r[8] for r in mine if r[6] and site(r[0]) != site(r[1])]
        local = [r[8] for r in mine if r[6] and site(r[0]) == site(r[1])]
        print(f"  cycle {cycle}: {len(measured)}/{pairs} ordered pairs measured, {span:.1f} s "
              f"({ratio:.2f}x the plan); goodput median across the WAN "
              f"{statistics.median(cross) / 1e6 if cross else 0:.0f} Mbit/s, within a site "
              f"{statistics.median(local) / 1e6 if local else 0:.0f} Mbit/s")
    failed = [r for r in tput if not r[6]]
    for r in failed[:10]:
        print(f"  failed: cycle {r[3]} {r[0]} -> {r[1]}: {r[7]}")
    # Truth: the bytes the destinations counted across the WAN against the emulator's.
    crossed = 0
    for r in tput:
        if r[6] and r[9] and site(r[0]) != site(r[1]):
            crossed += json.loads(r[9])["summary"]["received_bytes"]
    passed = forwarded_bytes(wan)
    print(f"Across the WAN: the destinations counted {crossed / 1e9:.3f} GB of stream payload; "
          f"the emulator forwarded {passed / 1e9:.3f} GB of frames (headers, rr and control included)"
          + ("" if passed >= crossed else "  ** fewer than counted: a miscount **"))
    lat = [r for r in rows if r[2] == "lat" and r[6]]
    cross_rtt = [r[8] * 1e3 for r in lat if site(r[0]) != site(r[1])]
    local_rtt = [r[8] * 1e3 for r in lat if site(r[0]) == site(r[1])]
    delay_ms = float(args.delay.rstrip("ms")) if args.delay.endswith("ms") else float("nan")
    print(f"rr probes: {len(lat)} jobs; median rtt across the WAN {statistics.median(cross_rtt) if cross_rtt else 0:.2f} ms "
          f"(the emulator adds {2 * delay_ms:.1f} ms), within a site {statistics.median(local_rtt) if local_rtt else 0:.3f} ms")
    print(f"Wall time {wall:.0f} s; worst cycle {worst:.2f}x the plan (bound 1.2x)")


if __name__ == "__main__":
    main()
