#!/usr/bin/env python3
"""The file mover beside the tools people use, on the same emulated path, in one run.

In a lab (linerate lab up: client, router with the path emulator, server) every tool
copies the same file from the client to the server, in interleaved rounds:

- linerate copy (adaptive rate), disk to disk: `linerate` searches the path's rate from
  scratch every run (--cold-start), `linerate-resumed` begins from what the copy before it
  over this path found (the client's path memory, kept in a scratch XDG_STATE_HOME);
- scp and rsync over OpenSSH (sshd started in the server namespace on port 2222);
- uftp (UDP, fixed rate) and GridFTP (globus-url-copy, parallel TCP streams), when their
  Debian packages install and start; a row says why when they do not;
- linerate stream over TCP with CUBIC and with BBR (no file: the TCP reference).

Goodput = file bytes / wall time of the client command (set-up, sync and verification
included). Truth beside each tool's own claim: the bytes the server's interface received
(its kernel counter) over the same wall time, and the destination file compared with the
source (SHA-256). A tool that does not finish within --limit seconds is stopped; its row
gives what the interface counted by then.

Also, outside the lab: the memory-to-memory ceiling over loopback (--null) with the CPU
seconds of both ends per Gbit, and the disk-to-disk rate against `linerate disk`.

    sudo python3 bench/transfer.py                          # 100 ms, 1 % loss, 1 Gbit/s, 1 GiB
    sudo python3 bench/transfer.py --loss 5% --size 512M
    sudo python3 bench/transfer.py --tools linerate,scp --runs 1

Needs root (namespaces). Installs openssh-server, rsync, uftp and the GridFTP programs from
Debian when missing. Builds linerate in release mode.
"""
import argparse, hashlib, json, os, shutil, signal, statistics, subprocess, sys, time

from common import LINERATE, ROOT, build, machine

LAB = "bt"
CLIENT = f"lrlab-{LAB}-client"
SERVER = f"lrlab-{LAB}-server"
SERVER_IP = "10.77.0.2"
SCRATCH = "/var/tmp/linerate-bench-transfer"
PACKAGES = {
    "sshd": "openssh-server",
    "rsync": "rsync",
    "uftp": "uftp",
    "globus-url-copy": "globus-gass-copy-progs",
    "globus-gridftp-server": "globus-gridftp-server-progs",
}


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, **kw)


def in_ns(ns, *args):
    return ["ip", "netns", "exec", ns, *args]


def which(name):
    return shutil.which(name) or (os.path.exists(f"/usr/sbin/{name}") and f"/usr/sbin/{name}")


def install_missing():
    missing = [pkg for tool, pkg in PACKAGES.items() if not which(tool)]
    if missing:
        print(f"installing {' '.join(missing)} ...", file=sys.stderr)
        sh("apt-get", "update", check=False)
        sh("apt-get", "install", "-y", "--no-install-recommends", *missing, check=False,
           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def rx_bytes():
    out = sh(*in_ns(SERVER, "cat", "/sys/class/net/eth0/statistics/rx_bytes"))
    return int(out.stdout.strip())


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 22)
            if not block:
                return h.hexdigest()
            h.update(block)


def make_source(path, size):
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    with open("/dev/urandom", "rb") as rnd, open(path, "wb") as out:
        left = size
        while left:
            block = rnd.read(min(left, 1 << 22))
            out.write(block)
            left -= len(block)


def parse_rate(text):
    """Bits per second from 1G, 500M, 2.5g (decimal, as linerate reads rates)."""
    units = {"K": 1e3, "M": 1e6, "G": 1e9}
    last = text[-1].upper()
    return int(float(text[:-1]) * units[last]) if last in units else int(text)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


class Servers:
    """Every tool's server in the lab's server namespace."""

    def __init__(self, key):
        self.procs = {}
        self.notes = {}
        self.key = key
        os.makedirs(f"{SCRATCH}/dest", exist_ok=True)
        self.start("linerate", in_ns(SERVER, LINERATE, "--no-store", "serve", "-q", "--files",
                                     f"{SCRATCH}/dest", "--key", key))
        self.ssh_ready = self.start_sshd()
        if which("uftpd"):
            self.start("uftp", in_ns(SERVER, which("uftpd"), "-d", "-D", f"{SCRATCH}/dest/uftp",
                                     "-p", "1044", "-T", f"{SCRATCH}/uftp-tmp"))
            os.makedirs(f"{SCRATCH}/dest/uftp", exist_ok=True)
            os.makedirs(f"{SCRATCH}/uftp-tmp", exist_ok=True)
        else:
            self.notes["uftp"] = "uftp not installed"
        if which("globus-gridftp-server"):
            # Anonymous access runs as nobody: its directory is open to it.
            os.makedirs(f"{SCRATCH}/dest/gridftp", exist_ok=True)
            for path, mode in ((SCRATCH, 0o755), (f"{SCRATCH}/dest", 0o755),
                               (f"{SCRATCH}/dest/gridftp", 0o777)):
                os.chmod(path, mode)
            self.start("gridftp", in_ns(SERVER, which("globus-gridftp-server"), "-s", "-aa", "-p",
                                        "2811", "-anonymous-user", "nobody", "-data-interface",
                                        SERVER_IP))
        else:
            self.notes["gridftp"] = "globus-gridftp-server not installed"
        time.sleep(1.0)

    def start(self, name, argv):
        # Globus resolves its own host name, which the lab's namespaces do not know.
        env = {**os.environ, "GLOBUS_HOSTNAME": SERVER_IP}
        self.procs[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env,
                                            stderr=subprocess.DEVNULL, start_new_session=True)

    def start_sshd(self):
        sshd = which("sshd")
        if not sshd:
            self.notes["scp"] = self.notes["rsync"] = "openssh-server not installed"
            return False
        os.makedirs("/run/sshd", exist_ok=True)
        for name, kind in (("host", "ed25519"), ("client", "ed25519")):
            if not os.path.exists(f"{SCRATCH}/{name}_key"):
                sh("ssh-keygen", "-q", "-t", kind, "-N", "", "-f", f"{SCRATCH}/{name}_key")
        shutil.copy(f"{SCRATCH}/client_key.pub", f"{SCRATCH}/authorized_keys")
        with open(f"{SCRATCH}/sshd_config", "w") as f:
            f.write(f"Port 2222\nListenAddress {SERVER_IP}\nHostKey {SCRATCH}/host_key\n"
                    f"PermitRootLogin yes\nAuthorizedKeysFile {SCRATCH}/authorized_keys\n"
                    "PasswordAuthentication no\nUsePAM no\nStrictModes no\n"
                    "Subsystem sftp internal-sftp\n")
        self.start("sshd", in_ns(SERVER, sshd, "-D", "-e", "-f", f"{SCRATCH}/sshd_config"))
        return True

    def stop(self):
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            proc.wait()


SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR"]


def commands(tool, source, key, args):
    """The client command for a tool and where its file lands."""
    dest = f"{SCRATCH}/dest/{tool}.bin"
    ssh_key = ["-i", f"{SCRATCH}/client_key"]
    if tool in ("linerate", "linerate-resumed"):
        cold = ["--cold-start"] if tool == "linerate" else []
        return in_ns(CLIENT, LINERATE, "--no-store", "copy", source, f"{SERVER_IP}:{tool}.bin",
                     "--key", key, "-q", "--json", *cold), dest
    if tool == "scp":
        return in_ns(CLIENT, "scp", "-P", "2222", *ssh_key, *SSH_OPTS, source,
                     f"root@{SERVER_IP}:{dest}"), dest
    if tool == "rsync":
        ssh = " ".join(["ssh", "-p", "2222", *ssh_key, *SSH_OPTS])
        return in_ns(CLIENT, "rsync", "--whole-file", "-e", ssh, source,
                     f"root@{SERVER_IP}:{dest}"), dest
    if tool == "uftp":
        # A fixed rate just under the bottleneck (uftp's default has no congestion control).
        kbps = str(int(args.rate_bps * 0.95 / 1000))
        return in_ns(CLIENT, which("uftp"), "-Y", "none", "-R", kbps, "-H", SERVER_IP,
                     "-M", SERVER_IP, "-p", "1044", source), f"{SCRATCH}/dest/uftp/{os.path.basename(source)}"
    if tool == "gridftp":
        dest = f"{SCRATCH}/dest/gridftp/{tool}.bin"
        return in_ns(CLIENT, which("globus-url-copy"), "-p", "8", "-tcp-bs", "16M",
                     f"file://{source}", f"ftp://{SERVER_IP}:2811{dest}"), dest
    if tool in ("tcp-cubic", "tcp-bbr"):
        cc = tool.split("-")[1]
        return in_ns(CLIENT, LINERATE, "--no-store", "stream", SERVER_IP, "-p", "5201", "-C", cc,
                     "-t", str(args.tcp_time), "--json", "--key", key), None
    raise ValueError(tool)


def run_tool(tool, source, size, key, args, servers):
    if tool in servers.notes:
        return {"tool": tool, "skipped": servers.notes[tool]}
    argv, dest = commands(tool, source, key, args)
    if dest and os.path.exists(dest):
        os.remove(dest)
    # Every tool meets a quiet disk: the copy before this one left up to a file's worth of
    # pages to write back, and a final fsync behind them took 0.45 s more of a 1 GiB copy.
    os.sync()
    before = rx_bytes()
    start = time.monotonic()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=args.limit,
                             env={**os.environ, "GLOBUS_HOSTNAME": "10.77.0.1",
                                  "XDG_STATE_HOME": f"{SCRATCH}/state"})
        wall = time.monotonic() - start
        timed_out = False
    except subprocess.TimeoutExpired:
        wall = time.monotonic() - start
        timed_out = True
        out = None
    wire = (rx_bytes() - before) * 8 / wall
    row = {"tool": tool, "wall_s": wall, "wire_bps": wire, "timed_out": timed_out}
    if out is not None and out.returncode != 0:
        row["failed"] = (out.stderr.strip().splitlines() or ["exit %d" % out.returncode])[-1][:120]
        return row
    if dest:
        row["verified"] = (not timed_out and os.path.exists(dest) and sha256(dest) == args.source_sha)
        row["goodput_bps"] = size * 8 / wall if row["verified"] else None
    if tool.startswith("linerate") and out is not None:
        doc = json.loads(out.stdout)
        copy = doc["copy"]
        row["claim_bps"] = copy["goodput_bps"]
        row["resumed_from_bps"] = copy.get("resumed_from_bps")
        row["resent_share"] = copy["resent_bytes"] / max(copy["payload_bytes"], 1)
        row["limit"] = copy["diagnosis"]
        # The ramp: the first 100 ms slice at 90 % of the bottleneck, from the first data.
        ramp = next((iv["end"] for iv in doc["intervals"]
                     if iv["receiver_bps"] >= 0.9 * args.rate_bps), None)
        row["ramp_s"] = ramp
    if tool.startswith("tcp-") and out is not None:
        doc = json.loads(out.stdout)
        row["claim_bps"] = doc["summary"]["receiver_bps"]
        row["goodput_bps"] = None
    return row


def fmt_rate(bps):
    if bps is None:
        return "-"
    return f"{bps / 1e9:.3f} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:.1f} Mbit/s"


def bound(args, size):
    """The protocol's own bound (docs/performance.md, "Copy: a burst a wake-up"): every
    1,514-byte frame carries 1,428 file bytes, each lost datagram is sent once more, and 3
    round trips of set-up and one of tail come on top, with no rate search at all."""
    rtt = parse_duration(args.rtt)
    loss = float(args.loss.rstrip("%")) / 100
    carried = args.rate_bps * 1428 / 1514 * (1 - loss)
    return size * 8 / (size * 8 / carried + 4 * rtt)


def parse_duration(text):
    for suffix, scale in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


def lab_path(args):
    return ["--rtt", args.rtt, "--loss", args.loss, "--rate", args.rate]


def ceiling(args, key):
    """Memory to memory over loopback, and disk to disk against `linerate disk`."""
    print("\n## Outside the lab (loopback, no shaper)")
    os.makedirs(f"{SCRATCH}/loop", exist_ok=True)
    serve = subprocess.Popen([LINERATE, "--no-store", "serve", "-q", "-p", "5299", "--listen",
                              "127.0.0.1", "--files", f"{SCRATCH}/loop", "--key", key],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        rows = []
        for mode in (["--null"], ["--null", "--encrypt"], []):
            for _ in range(args.runs):
                out = sh(LINERATE, "--no-store", "copy", args.source, "127.0.0.1:loop.bin", "-p",
                         "5299", "--key", key, "-q", "--json", *mode)
                copy = json.loads(out.stdout)["copy"]
                gbit = copy["bytes"] * 8 / 1e9
                name = {0: "disk to disk", 1: "memory to memory (--null)",
                        2: "--null --encrypt"}[len(mode)]
                rows.append((name,
                             copy["goodput_bps"], copy["cpu_s"]["local"] / gbit,
                             copy["cpu_s"]["remote"] / gbit, copy["diagnosis"]))
        for name, bps, cpu_send, cpu_recv, why in rows:
            print(f"{name:28} {fmt_rate(bps):>16}  CPU s/Gbit sender {cpu_send:.3f} "
                  f"receiver {cpu_recv:.3f}  {why}")
        disk = json.loads(sh(LINERATE, "disk", f"{SCRATCH}/loop", "--size", args.size, "--json").stdout)
        print(f"linerate disk {SCRATCH}: write {disk['write_bps'] * 8 / 1e9:.2f} Gbit/s, "
              f"read {disk['read_bps'] * 8 / 1e9:.2f} Gbit/s")
        best_disk = statistics.median(r[1] for r in rows if r[0] == "disk to disk")
        print(f"disk to disk / min(path, disk write) = "
              f"{best_disk / (disk['write_bps'] * 8):.2f} (the path here is loopback, faster than the disk)")
    finally:
        serve.terminate()
        serve.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rtt", default="100ms")
    parser.add_argument("--loss", default="1%")
    parser.add_argument("--rate", default="1G")
    parser.add_argument("--limit", type=float, default=120.0, help="seconds a tool may take")
    parser.add_argument("--tcp-time", type=float, default=15.0)
    parser.add_argument("--tools", default="linerate,scp,rsync,uftp,gridftp,tcp-cubic,tcp-bbr")
    parser.add_argument("--no-ceiling", action="store_true")
    args = parser.parse_args()
    print(machine(), flush=True)
    if os.geteuid() != 0:
        sys.exit("bench/transfer.py needs root (network namespaces)")
    build()
    install_missing()
    os.makedirs(SCRATCH, exist_ok=True)
    size = parse_size(args.size)
    args.rate_bps = parse_rate(args.rate)
    key = f"{SCRATCH}/key"
    with open(key, "w") as f:
        f.write("the transfer benchmark's shared key\n")
    args.source = f"{SCRATCH}/source.bin"
    make_source(args.source, size)
    args.source_sha = sha256(args.source)
    sh(LINERATE, "lab", "down", "--name", LAB, check=False)
    up = sh(LINERATE, "lab", "up", "--name", LAB, *lab_path(args),
            "--buffers", "64M")
    servers = Servers(key)
    tools = args.tools.split(",")
    results = {t: [] for t in tools}
    try:
        print(f"# {args.size} file, lab: RTT {args.rtt}, loss {args.loss}, bottleneck {args.rate}, "
              f"MTU 1500, TCP buffers 64M; {args.runs} interleaved rounds; {os.cpu_count()} CPUs")
        print(f"# the protocol's own bound on this path: {fmt_rate(bound(args, size))}")
        shutil.rmtree(f"{SCRATCH}/state", ignore_errors=True)
        for round_ in range(args.runs):
            for tool in tools:
                row = run_tool(tool, args.source, size, key, args, servers)
                results[tool].append(row)
                print(f"round {round_ + 1} {tool:10} " + json.dumps(
                    {k: v for k, v in row.items() if k != "tool"}), file=sys.stderr)
    finally:
        servers.stop()
        sh(LINERATE, "lab", "down", "--name", LAB, check=False)
    print(f"\n{'tool':10} {'goodput':>16} {'its claim':>16} {'iface rx':>16} {'verified':>9}  "
          f"{'linerate/tool':>13}  notes")
    lr = [r["goodput_bps"] for r in results.get("linerate", []) if r.get("goodput_bps")]
    lr_median = statistics.median(lr) if lr else None
    for tool in tools:
        rows = results[tool]
        if rows and "skipped" in rows[0]:
            print(f"{tool:10} {'not run':>16}  {rows[0]['skipped']}")
            continue
        good = [r["goodput_bps"] for r in rows if r.get("goodput_bps")]
        claim = [r["claim_bps"] for r in rows if r.get("claim_bps")]
        wire = [r["wire_bps"] for r in rows]
        gp = statistics.median(good) if good else None
        reference = gp or (statistics.median(claim) if claim else None)
        ratio = f"{lr_median / reference:.2f}" if lr_median and reference else "-"
        notes = []
        for r in rows:
            if r.get("failed"):
                notes.append("failed: " + r["failed"])
            if r.get("timed_out"):
                notes.append(f"stopped after {args.limit:.0f} s")
            if "resent_share" in r:
                notes.append(f"resent {r['resent_share'] * 100:.2f} %, ramp {r['ramp_s']} s")
            if r.get("goodput_bps") and tool.startswith("linerate"):
                notes.append(f"{r['goodput_bps'] / bound(args, size) * 100:.1f} % of the bound")
            if r.get("resumed_from_bps"):
                notes.append(f"began at {fmt_rate(r['resumed_from_bps'])}")
        verified = "-" if tool.startswith("tcp-") else f"{sum(bool(r.get('verified')) for r in rows)}/{len(rows)}"
        print(f"{tool:10} {fmt_rate(gp):>16} {fmt_rate(statistics.median(claim) if claim else None):>16} "
              f"{fmt_rate(statistics.median(wire)):>16} {verified:>9}  {ratio:>13}  {'; '.join(dict.fromkeys(notes))}")
    for r in results.get("linerate", []):
        if r.get("limit"):
            print(f"linerate: {r['limit']}")
            break
    if not args.no_ceiling:
        ceiling(args, key)


if __name__ == "__main__":
    main()
