#!/usr/bin/env python3
"""What encryption costs on loopback: linerate's TLS and QUIC streams against plain TCP and
against a reference TLS transfer a user would trust (nginx serving a file from memory to
curl, both on OpenSSL), interleaved in one run.

Every run is one server and one client in a network namespace of their own (as root),
each side's processes in a CPU control group of their own (peers.py's run_sides). For each
tool: the goodput it claims, the goodput `lo` counted over the client's wall time (TLS
records and IP/TCP headers included, about 0.2 %), CPU seconds per Gbit of each side and of
both, and linerate's ratios to the reference. The reference's client reads with curl's
16 KiB buffer and its server writes with nginx's output buffers, as they ship.

    python3 bench/crypto.py                       # 3 x 5 s, AES-256-GCM, server sends
    python3 bench/crypto.py --cipher aes128-gcm --runs 5

kTLS is measured where the kernel has it (tcp_available_ulp lists tls); otherwise the
script says so. Installs nginx-light when missing and run as root.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

from common import LINERATE, build, free_port, machine
from peers import LAST_TRUTH, run_sides

SUITES = {"aes128-gcm": "TLS_AES_128_GCM_SHA256", "aes256-gcm": "TLS_AES_256_GCM_SHA384",
          "chacha20-poly1305": "TLS_CHACHA20_POLY1305_SHA256"}


def ktls_available():
    try:
        with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
            return "tls" in f.read().split()
    except OSError:
        return False


def linerate(seconds, cipher, mode):
    """One linerate run; `mode` is plain, tls, ktls or quic. The server sends (-R), as
    nginx does."""
    port = free_port()
    server = [LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q", "--no-store"]
    client = [LINERATE, "stream", "127.0.0.1", "-p", str(port), "-R", "-t", str(seconds), "--json", "--no-store"]
    if mode in ("tls", "ktls"):
        client += ["--tls", "--cipher", cipher]
    if mode == "ktls":
        client.append("--ktls")
    if mode == "quic":
        client += ["--quic", "--cipher", cipher]
    out, _, server_cpu, client_cpu = run_sides(server, client)
    doc = json.loads(out)
    return doc["summary"]["receiver_bps"], server_cpu, client_cpu


def rr(seconds, tls):
    """One linerate rr run, 1-byte messages: transactions per second and median round
    trip in microseconds."""
    port = free_port()
    server = [LINERATE, "serve", "--listen", "127.0.0.1", "-p", str(port), "-q", "--no-store"]
    client = [LINERATE, "rr", "127.0.0.1", "-p", str(port), "-t", str(seconds), "--json", "--no-store"]
    if tls:
        client.append("--tls")
    out, _, _, _ = run_sides(server, client)
    summary = json.loads(out)["summary"]
    return summary["transactions_per_s"], summary["latency_us"]["p50"]


class Nginx:
    """A scratch nginx configuration serving one file from /dev/shm over TLS 1.3."""

    def __init__(self, size, cipher):
        self.dir = tempfile.mkdtemp(prefix="lrbench-nginx-", dir="/dev/shm")
        os.chmod(self.dir, 0o755)  # nginx's worker drops to an unprivileged user
        self.size = size
        with open(os.path.join(self.dir, "object"), "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(size >> 20):
                f.write(block)
        os.chmod(os.path.join(self.dir, "object"), 0o644)
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-subj", "/CN=localhost", "-days", "1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        self.suite = SUITES[cipher]
        self.cert, self.key = cert, key

    def config(self, port):
        path = os.path.join(self.dir, f"nginx-{port}.conf")
        temp = os.path.join(self.dir, "tmp")
        os.makedirs(temp, exist_ok=True)
        with open(path, "w") as f:
            f.write(f"""worker_processes 1;
daemon off;
pid {self.dir}/nginx-{port}.pid;
error_log {self.dir}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {temp}; proxy_temp_path {temp}; fastcgi_temp_path {temp};
    uwsgi_temp_path {temp}; scgi_temp_path {temp};
    sendfile off;
    output_buffers 2 256k;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {self.cert};
        ssl_certificate_key {self.key};
        ssl_protocols TLSv1.3;
        ssl_conf_command Ciphersuites {self.suite};
        root {self.dir};
    }}
}}
""")
        return path

    def run(self):
        port = free_port()
        server = ["nginx", "-c", self.config(port), "-e", os.path.join(self.dir, "error.log")]
        client = ["curl", "-sk", "--tlsv1.3", "--tls13-ciphers", self.suite, "-o", "/dev/null",
                  "-w", "%{size_download} %{speed_download}", f"https://127.0.0.1:{port}/object"]
        out, _, server_cpu, client_cpu = run_sides(server, client, settle=0.5)
        size, speed = out.split()
        if int(float(size)) != self.size:
            raise RuntimeError(f"curl fetched {size} of {self.size} bytes")
        return float(speed) * 8, server_cpu, client_cpu

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cipher", default="aes256-gcm", choices=sorted(SUITES))
    parser.add_argument("--size", type=int, default=6, help="GiB nginx serves per run (about the same seconds)")
    args = parser.parse_args()
    print(machine(), flush=True)
    build()
    if not shutil.which("nginx") and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "nginx-light"], check=False, env=env)
    modes = ["plain", "tls", "quic"] + (["ktls"] if ktls_available() else [])
    nginx = Nginx(args.size << 30, args.cipher) if shutil.which("nginx") and shutil.which("curl") else None
    tools = {f"linerate {m}": (lambda m=m: linerate(args.time, args.cipher, m)) for m in modes}
    if nginx:
        tools["nginx+curl"] = nginx.run
    results = {name: [] for name in tools}
    try:
        for run in range(args.runs):
            for name, fn in tools.items():
                try:
                    bps, server_cpu, client_cpu = fn()
                except Exception as error:
                    print(f"  {name}: run {run + 1} failed: {error}", file=sys.stderr)
                    continue
                truth = LAST_TRUTH["bytes"] * 8 / LAST_TRUTH["wall"] if LAST_TRUTH else None
                gbit = (LAST_TRUTH["bytes"] * 8 / 1e9) if LAST_TRUTH else bps * args.time / 1e9
                results[name].append((bps, truth, server_cpu / gbit, client_cpu / gbit))
                told = f" lo {truth / 1e9:6.2f}" if truth else ""
                print(f"  run {run + 1} {name:14s} {bps / 1e9:6.2f} Gbit/s{told}  "
                      f"CPU s/Gbit server {server_cpu / gbit:.4f} client {client_cpu / gbit:.4f}", file=sys.stderr)
    finally:
        if nginx:
            nginx.remove()
    print(f"Encryption on loopback, {args.cipher}, the server sends, median of {args.runs} runs "
          f"(linerate {args.time} s; nginx+curl {args.size} GiB)")
    print("lo: bytes the namespace's lo counted over the client's wall time; CPU s/Gbit: each side's")
    print("processes (a control group each) over the Gbits lo counted")
    if not ktls_available():
        print("kTLS: not measured: this kernel has no TLS upper-layer protocol (tcp_available_ulp)")
    print(f"{'tool':15s} {'claim Gbit/s':>12s} {'lo Gbit/s':>10s} {'server s/Gbit':>13s} {'client s/Gbit':>13s} "
          f"{'both s/Gbit':>11s}")
    medians = {}
    for name, rows in results.items():
        if not rows:
            continue
        claim = statistics.median(r[0] for r in rows)
        truths = [r[1] for r in rows if r[1]]
        truth = statistics.median(truths) if truths else None
        server = statistics.median(r[2] for r in rows)
        client = statistics.median(r[3] for r in rows)
        both = statistics.median(r[2] + r[3] for r in rows)
        medians[name] = (truth or claim, both)
        lo = f"{truth / 1e9:10.2f}" if truth else f"{'-':>10s}"
        print(f"{name:15s} {claim / 1e9:12.2f} {lo} {server:13.4f} {client:13.4f} {both:11.4f}")

    def ratio(a, b, what):
        if a in medians and b in medians:
            (ra, ca), (rb, cb) = medians[a], medians[b]
            print(f"{a} / {b}: goodput {ra / rb:.2f}x, CPU per Gbit {ca / cb:.2f}x  ({what})")

    ratio("linerate tls", "nginx+curl", "target: goodput >= 0.9x at CPU per Gbit <= 1x")
    ratio("linerate tls", "linerate plain", "what TLS costs")
    ratio("linerate ktls", "linerate tls", "target: CPU per Gbit <= 1x")
    ratio("linerate quic", "linerate tls", "target: goodput >= 0.5x")

    # Request/response through TLS records: the round trip's price.
    trips = {False: [], True: []}
    for run in range(args.runs):
        for tls in (False, True):
            try:
                trips[tls].append(rr(args.time, tls))
            except Exception as error:
                print(f"  rr{' --tls' if tls else ''}: run {run + 1} failed: {error}", file=sys.stderr)
    if trips[False] and trips[True]:
        print("TCP_RR, 1-byte messages, 1 flow (median of the runs):")
        for tls in (False, True):
            tps = statistics.median(t[0] for t in trips[tls])
            p50 = statistics.median(t[1] for t in trips[tls])
            print(f"  {'linerate rr --tls' if tls else 'linerate rr':18s} {tps:10.0f} transactions/s, p50 {p50:6.1f} us")


if __name__ == "__main__":
    main()
