#!/usr/bin/env python3
"""linerate copy over a NIC-like link: two network namespaces joined by a veth pair with
the kernel's default offloads (checksum, segmentation, MTU 1500), as a host with a real
NIC has them. The copy's sender hands runs of datagrams to the kernel as one segmented
send (UDP GSO) and its receiver takes them coalesced (UDP GRO) where the link allows; the
lab's links turn offloads off, so this is where those two show.

Each round copies --size from memory to memory (--null) with each binary in turn
(`--baseline` names a build to compare with, e.g. one from before a change; each build
copies to a server of its own build), interleaved,
and prints the goodput, the CPU seconds per Gbit of both ends, and the bytes the server's
interface received over the copy's wall time (its kernel counter: the truth beside the
claim).

    sudo python3 bench/copy_offloads.py
    sudo python3 bench/copy_offloads.py --baseline /tmp/linerate-before --runs 5
    sudo python3 bench/copy_offloads.py --lanes 1,2,4     # over 1, 2 and 4 UDP flows

Needs root (namespaces).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

from common import LINERATE, build, machine

CLIENT, SERVER = "lrco-client", "lrco-server"
CLIENT_IP, SERVER_IP = "10.78.0.1", "10.78.0.2"
PORT = 5396


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True)


def rx_bytes():
    return int(sh("ip", "netns", "exec", SERVER, "cat", "/sys/class/net/srv0/statistics/rx_bytes").stdout)


def link_up():
    for ns in (CLIENT, SERVER):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", "cli0", "netns", CLIENT, "type", "veth", "peer", "name", "srv0",
       "netns", SERVER)
    for ns, dev, addr in ((CLIENT, "cli0", CLIENT_IP), (SERVER, "srv0", SERVER_IP)):
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")


def link_down():
    for ns in (CLIENT, SERVER):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def copy_once(binary, port, source, key, lanes, extra=()):
    before, start = rx_bytes(), time.time()
    out = sh("ip", "netns", "exec", CLIENT, binary, "--no-store", "copy", source,
             f"{SERVER_IP}:x.bin", "-p", str(port), "--key", key, "-q", "--json", "--null",
             *(["--lanes", str(lanes)] if lanes > 1 else []), *extra)
    wall = time.time() - start
    wire = (rx_bytes() - before) * 8 / wall
    copy = json.loads(out.stdout)["copy"]
    gbit = copy["bytes"] * 8 / 1e9
    return {"bps": copy["goodput_bps"], "wire": wire,
            "cpu_send": copy["cpu_s"]["local"] / gbit, "cpu_recv": copy["cpu_s"]["remote"] / gbit,
            "why": copy["diagnosis"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1G", help="bytes a copy moves (a file in /dev/shm)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default="", help="another linerate build, run interleaved")
    ap.add_argument("--lanes", default="1",
                    help="lane counts to run linerate (and the baseline) with, e.g. 1,2,4")
    ap.add_argument("--no-offloads", action="store_true",
                    help="turn the veth pair's checksum offload and GRO off (the lab's links: "
                         "a datagram a message both ways), to weigh the per-datagram costs")
    ap.add_argument("--copy-args", default="",
                    help="more options for every copy, e.g. --encrypt")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/copy_offloads.py needs root (network namespaces)")
    build()
    print(machine())
    binaries = [("linerate", LINERATE)] + ([("baseline", args.baseline)] if args.baseline else [])
    work = tempfile.mkdtemp(prefix="linerate-co-", dir="/dev/shm")
    source, key = os.path.join(work, "source.bin"), os.path.join(work, "key")
    with open(key, "w") as f:
        f.write("the offload bench's key, for its own server only\n")
    sh("sh", "-c", f"head -c {args.size} /dev/urandom > {source}")
    link_down()
    servers = []
    try:
        link_up()
        if args.no_offloads:
            for ns, dev in ((CLIENT, "cli0"), (SERVER, "srv0")):
                sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off", "rx", "off",
                   "gro", "off", "gso", "off", "tso", "off")
            print("offloads off: checksums in software, no GRO (a datagram a message)")
        os.makedirs(os.path.join(work, "dest"))
        # Each build copies to a server of its own build: both ends as they were.
        for i, (_, binary) in enumerate(binaries):
            servers.append(subprocess.Popen(
                ["ip", "netns", "exec", SERVER, binary, "--no-store", "serve", "-q", "-p",
                 str(PORT + i), "--listen", SERVER_IP, "--files", os.path.join(work, "dest"),
                 "--key", key], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1)
        runs = [(f"linerate, {n} lane{'s' if n > 1 else ''}", LINERATE, 0, n)
                for n in map(int, args.lanes.split(","))]
        if args.baseline:
            runs += [(f"baseline, {n} lane{'s' if n > 1 else ''}", args.baseline, 1, n)
                     for n in map(int, args.lanes.split(","))]
        rows = {name: [] for name, *_ in runs}
        for round_ in range(args.runs):
            for name, binary, server, lanes in runs:
                row = copy_once(binary, PORT + server, source, key, lanes,
                                args.copy_args.split())
                rows[name].append(row)
                print(f"round {round_ + 1} {name:18} {row['bps'] / 1e9:6.2f} Gbit/s "
                      f"(interface {row['wire'] / 1e9:.2f}), CPU s/Gbit sender "
                      f"{row['cpu_send']:.3f} receiver {row['cpu_recv']:.3f}; {row['why']}",
                      flush=True)
        print("\nmedians:")
        for name, got in rows.items():
            med = lambda key: statistics.median(r[key] for r in got)
            print(f"  {name:18} {med('bps') / 1e9:6.2f} Gbit/s, CPU s/Gbit sender "
                  f"{med('cpu_send'):.3f} receiver {med('cpu_recv'):.3f}")
    finally:
        for server in servers:
            server.terminate()
            server.wait()
        link_down()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
