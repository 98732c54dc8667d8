"""What a resumed copy pays to check its `.part` before trusting it.

A copy of SIZE over loopback is stopped part-way (kill -9 of the client once the
receiver's journal records about half the file), then run again: the receiver reads every
journaled chunk back and hashes it before it accepts (docs/transfer-protocol.md 6). Printed:
the chunks read back, the seconds the reading took and its rate, with the page cache
dropped first (the disk's rate) and with the chunks still cached, beside the resumed
copy's wall time and a whole copy of the same file.

    sudo python3 bench/resume_check.py [--size 1G] [--dir /var/tmp] [--binary PATH]

Root is needed to drop the page cache; without it the cold run is skipped.
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, time

import common
from common import build, free_port, machine

MIB = 1 << 20
LINERATE = common.LINERATE


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def journal_chunks(path):
    try:
        with open(path) as f:
            return max(0, sum(1 for _ in f) - 1)
    except OSError:
        return 0


def drop_caches():
    if os.geteuid() != 0:
        return False
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    return True


def copy(port, key, source, dest, *extra):
    out = subprocess.run([LINERATE, "--no-store", "copy", "-p", str(port), "--key", key, "--json", "-q",
                          *extra, source, f"127.0.0.1:{dest}"], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"copy failed: {out.stderr}")
    return json.loads(out.stdout)["copy"]


def interrupted_copy(port, key, source, dest, journal, half_chunks):
    client = subprocess.Popen([LINERATE, "--no-store", "copy", "-p", str(port), "--key", key, "-q",
                               "--rate", "2G", source, f"127.0.0.1:{dest}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while journal_chunks(journal) < half_chunks and time.time() < deadline:
        time.sleep(0.05)
    client.send_signal(signal.SIGKILL)
    client.wait()
    time.sleep(1.5)  # the server sees the connection close and lets the .part go
    return journal_chunks(journal)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G")
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--binary", help="a linerate built already (else target/release/linerate, built)")
    args = parser.parse_args()
    global LINERATE
    if args.binary:
        LINERATE = args.binary
    else:
        build()
    size = size_bytes(args.size)
    work = tempfile.mkdtemp(prefix="linerate-resume-", dir=args.dir)
    server = None
    try:
        served = os.path.join(work, "served")
        os.makedirs(served)
        key = os.path.join(work, "key")
        with open(key, "w") as f:
            f.write("the resume benchmark's key, 32 b\n")
        source = os.path.join(work, "f.bin")
        with open(source, "wb") as f:
            left = size
            while left > 0:
                f.write(os.urandom(min(left, 64 * MIB)))
                left -= min(left, 64 * MIB)
        port = free_port()
        server = subprocess.Popen([LINERATE, "--no-store", "serve", "-q", "-p", str(port), "--listen", "127.0.0.1",
                                   "--files", served, "--key", key],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        print(machine())
        whole = copy(port, key, source, "whole.bin")
        print(f"whole copy of {size / MIB:.0f} MiB: {whole['wall_s']:.2f} s")
        journal = os.path.join(served, "f.bin.part.journal")
        for cold in (True, False):
            if cold and os.geteuid() != 0:
                print("cold: skipped (dropping the page cache needs root)")
                continue
            for name in ("f.bin", "f.bin.part", "f.bin.part.journal"):
                try:
                    os.unlink(os.path.join(served, name))
                except FileNotFoundError:
                    pass
            journaled = interrupted_copy(port, key, source, "f.bin", journal, size // MIB // 2)
            if cold:
                drop_caches()
            resumed = copy(port, key, source, "f.bin")
            checked = resumed.get("resume_checked_chunks", 0)
            seconds = resumed.get("resume_check_s", 0.0)
            rate = checked * MIB / seconds / 1e6 if seconds > 0 else float("nan")
            print(f"{'cold' if cold else 'warm'}: {journaled} chunks journaled; the resume read back "
                  f"{checked} ({checked * MIB / 1e9:.2f} GB) in {seconds:.3f} s ({rate:.0f} MB/s), "
                  f"{resumed.get('resume_damaged_chunks', 0)} damaged; resumed copy {resumed['wall_s']:.2f} s, "
                  f"{resumed['resumed_bytes'] / MIB:.0f} MiB already there")
    finally:
        if server:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
