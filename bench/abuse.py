#!/usr/bin/env python3
"""Every attack of docs/security.md against one default public server at once, for a
bounded time, while a normal client keeps testing.

    python3 bench/abuse.py [--seconds 120] [--binary target/release/linerate]

The server is `linerate serve` with no key and default limits (a public server), on
loopback. Attackers, each on its own thread, repeat until the time is up:

  reflect     a mirror with `accept udp` then writes, and UDP hellos with its token from
              sockets that never answer the cookie (on the wire, a hello forged with a
              victim's address); counts what reaches those "victims"
  budget      agent requests over their budget: 20,000 transactions, 20,000 nops, 5,000
              groups, a mirror of 4,096 threads x 256 KiB messages, a NaN-like think
  sleepers    1,000 threads prepared for a start 20 s ahead, then the connection dropped
  hoard       agent connections that say hello and then only ping, to hold slots
  flood       connections that send half a preface and stay silent
  wrap        a bidirectional spec of 2^31 flows
  forge-log   a hello whose software name carries a newline and a terminal escape
  silent-http 1,024 connections to the RPM listener (`--http`) from four addresses
              (127.0.0.2-5) that never send a byte, reopened as they are closed
  silent-metrics  64 such connections to the metrics listener (`--metrics`) from one
              address
  claim       uploads declaring 100 GiB (`Content-Length`) to /slurp

A normal HTTP client (127.0.0.1) meanwhile fetches /small from the RPM listener and
scrapes /metrics, each within 1 s or counted as failed.

It prints, every 5 s: the normal client's successes and failures so far, the server's
RSS (MiB), threads and descriptors, and what the reflection victims received; at the end
the normal client's success rate and the peaks. Every loop stops by itself.
"""
import argparse, json, os, socket, struct, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LINERATE, free_port  # noqa: E402

STOP = threading.Event()
COUNTS = {"normal_ok": 0, "normal_fail": 0, "http_ok": 0, "http_fail": 0,
          "http_slowest_ms": 0, "silent_held_http": 0, "silent_held_metrics": 0, "silent_opened": 0, "claims_413": 0,
          "claims_other": 0, "victim_datagrams": 0, "victim_bytes": 0,
          "mirrors": 0, "hellos": 0, "cookies": 0,
          "refused_requests": 0, "accepted_oversized": 0, "errors": 0}
LOCK = threading.Lock()


def bump(key, by=1):
    with LOCK:
        COUNTS[key] += by


def frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def read_frame(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    (length,) = struct.unpack(">I", head)
    body = b""
    while len(body) < length:
        chunk = sock.recv(min(65536, length - len(body)))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return json.loads(body)


def agent(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"LINEAGNT" + struct.pack(">I", 2) + frame({"type": "hello"}))
    welcome = read_frame(s)
    assert welcome["type"] == "welcome", welcome
    return s


def reply(sock):
    while True:
        message = read_frame(sock)
        if message.get("type") != "heartbeat":
            return message


def group(threads, transactions):
    return {"name": "g", "threads": threads, "transactions": transactions}


def txn(ops):
    return {"repeat": {"iterations": 1}, "ops": [{"action": a} for a in ops]}


def normal_client(port):
    while not STOP.is_set():
        out = subprocess.run([LINERATE, "stream", "127.0.0.1", "-p", str(port), "-t", "1",
                              "--json", "--no-store"], capture_output=True, timeout=60)
        ok = out.returncode == 0 and json.loads(out.stdout)["summary"]["receiver_bytes"] > 0
        bump("normal_ok" if ok else "normal_fail")


def reflect(port):
    while not STOP.is_set():
        try:
            s = agent(port)
            mirror = group(2, [txn([{"accept": {"protocol": "udp"}}]),
                               {"repeat": {"duration": 5.0},
                                "ops": [{"action": {"write": {"size": {"fixed": 1400}, "count": 1}}}]}])
            s.sendall(frame({"type": "mirror", "spec": {"group": mirror, "dial_back": None, "limit_s": 10.0}}))
            ready = reply(s)
            if ready.get("type") != "mirror_ready":
                bump("errors")
                s.close()
                continue
            bump("mirrors")
            token = bytes.fromhex(ready["token"])
            victims = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(20)]
            for v in victims:
                v.bind(("127.0.0.1", 0))
                v.setblocking(False)
            until = time.time() + 5
            while time.time() < until and not STOP.is_set():
                for flow, v in enumerate(victims):
                    hello = b"LINEDATA" + token + struct.pack(">I", flow << 12)
                    v.sendto(hello, ("127.0.0.1", ready["udp_port"]))
                    bump("hellos")
                time.sleep(0.05)
                for v in victims:
                    while True:
                        try:
                            data = v.recv(65536)
                        except BlockingIOError:
                            break
                        # The cookie is the one answer a hello may get.
                        if data.startswith(b"LINECOOK") and len(data) <= len(hello):
                            bump("cookies")
                        else:
                            bump("victim_datagrams")
                            bump("victim_bytes", len(data))
            for v in victims:
                v.close()
            s.close()
        except (OSError, ConnectionError, AssertionError, json.JSONDecodeError):
            bump("errors")
            time.sleep(0.2)


def budget(port):
    write256k = {"write": {"size": {"fixed": 262144}, "count": 1}}
    requests = [
        {"type": "prepare", "limit_s": 10.0, "parts": [
            {"index": 0, "host_label": "h", "group": group(16, [txn([])] * 20000)}]},
        {"type": "prepare", "limit_s": 10.0, "parts": [
            {"index": 0, "host_label": "h", "group": group(1, [txn(["nop"] * 20000)])}]},
        {"type": "prepare", "limit_s": 10.0, "parts": [
            {"index": i, "host_label": "h", "group": group(1, [txn(["nop"])])} for i in range(5000)]},
        {"type": "mirror", "spec": {"group": group(4096, [txn([write256k])]), "dial_back": None, "limit_s": 10.0}},
        {"type": "prepare", "limit_s": 10.0, "parts": [
            {"index": 0, "host_label": "h", "group": group(1, [txn([{"think": {"seconds": 1e300, "busy": False}}])])}]},
    ]
    while not STOP.is_set():
        for request in requests:
            if STOP.is_set():
                return
            try:
                s = agent(port)
                s.sendall(frame(request))
                answer = reply(s)
                bump("refused_requests" if answer.get("type") == "error" else "accepted_oversized")
                s.close()
            except (OSError, ConnectionError, AssertionError):
                bump("errors")
                time.sleep(0.2)


def sleepers(port):
    while not STOP.is_set():
        try:
            s = agent(port)
            s.sendall(frame({"type": "prepare", "limit_s": 30.0, "parts": [
                {"index": 0, "host_label": "h",
                 "group": group(1000, [txn([{"think": {"seconds": 0.001, "busy": False}}])])}]}))
            answer = reply(s)
            if answer.get("type") == "prepared":
                s.sendall(frame({"type": "start", "at_unix_ns": time.time_ns() + 20_000_000_000}))
                time.sleep(1)
            s.close()
        except (OSError, ConnectionError, AssertionError):
            bump("errors")
        STOP.wait(2)


def hoard(port):
    held = []
    while not STOP.is_set():
        try:
            if len(held) < 200:
                held.append(agent(port))
            for seq, s in enumerate(held):
                s.sendall(frame({"type": "ping", "seq": seq}))
        except (OSError, ConnectionError, AssertionError):
            held = [s for s in held if s.fileno() >= 0]
            bump("errors")
        STOP.wait(0.5)
    for s in held:
        s.close()


def flood(port):
    held = []
    while not STOP.is_set():
        for _ in range(100):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.sendall(b"LINE")
                held.append(s)
            except OSError:
                break
        if len(held) > 2000:
            for s in held[:1000]:
                s.close()
            held = held[1000:]
        STOP.wait(0.5)
    for s in held:
        s.close()


def wrap_and_forge(port):
    host = {"hostname": "h", "kernel": "k", "cpu_model": "c", "cores": 1, "cpu_mhz": None, "software": "x"}
    spec = {"type": "spec", "config": {
        "protocol": "tcp", "target": "t", "port": port, "direction": "bidir",
        "parallel": 2 ** 31, "threads": 1, "time_s": 1.0, "omit_s": 0.0, "interval_s": 1.0,
        "length": 1024, "window": None, "mss": None, "nodelay": False, "congestion": None,
        "rate_bps": None, "per_flow": False, "connect_timeout_s": 5.0}}
    while not STOP.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            forged = "x\n2026-01-01T00:00:00Z refused 10.9.9.9: forged line\x1b[2J"
            s.sendall(b"LINERATE" + struct.pack(">I", 1) +
                      frame({"type": "hello", "software": forged, "host": host}) + frame(spec))
            read_frame(s)
            answer = read_frame(s)
            bump("refused_requests" if answer.get("type") == "refuse" else "accepted_oversized")
            s.close()
        except (OSError, ConnectionError):
            bump("errors")
        STOP.wait(0.5)


def http_get(port, path, timeout=1.0):
    """(status line, seconds) of a GET from 127.0.0.1, within `timeout`."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0].decode(errors="replace"), time.monotonic() - started


def normal_http(http_port, metrics_port):
    while not STOP.is_set():
        for port, path in ((http_port, "/small"), (metrics_port, "/metrics")):
            try:
                status, took = http_get(port, path)
                ok = status.endswith("200 OK") and took < 1.0
                with LOCK:
                    COUNTS["http_slowest_ms"] = max(COUNTS["http_slowest_ms"], int(took * 1000))
            except OSError:
                ok = False
            bump("http_ok" if ok else "http_fail")
        STOP.wait(0.2)


def silent(port, sources, count, held_key):
    """Holds `count` connections from `sources` that never send, reopening closed ones;
    how many are open (not yet closed by the server) goes to COUNTS[held_key]."""
    held = []
    while not STOP.is_set():
        alive = []
        for s in held:
            try:
                s.settimeout(0)
                if s.recv(1) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            alive.append(s)
        held = alive
        while len(held) < count and not STOP.is_set():
            try:
                s = socket.socket()
                s.bind((sources[len(held) % len(sources)], 0))
                s.settimeout(1)
                s.connect(("127.0.0.1", port))
                held.append(s)
                bump("silent_opened")
            except OSError:
                s.close()
                break
        with LOCK:
            COUNTS[held_key] = len(held)
        STOP.wait(0.5)
    for s in held:
        s.close()


def claim(port):
    while not STOP.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"POST /slurp HTTP/1.1\r\nHost: x\r\nContent-Length: 107374182400\r\n\r\n")
                answer = s.recv(256)
                bump("claims_413" if answer.startswith(b"HTTP/1.1 413") else "claims_other")
        except OSError:
            bump("claims_other")
        STOP.wait(0.5)


def proc_figures(pid):
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) // 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, threads, fds


def main():
    global LINERATE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--binary", default=LINERATE)
    args = parser.parse_args()
    LINERATE = args.binary
    if not os.path.exists(LINERATE):
        sys.exit(f"no binary at {LINERATE}: cargo build --release first")
    port, http_port, metrics_port = free_port(), free_port(), free_port()
    log = open(os.path.join("/tmp", f"linerate-abuse-{os.getpid()}.log"), "w")
    server = subprocess.Popen([LINERATE, "serve", "--listen", "127.0.0.1", "--port", str(port),
                               "--http", f"127.0.0.1:{http_port}",
                               "--metrics", f"127.0.0.1:{metrics_port}"],
                              stdout=subprocess.DEVNULL, stderr=log)
    time.sleep(0.5)
    workers = [threading.Thread(target=f, args=(port,), daemon=True)
               for f in (normal_client, reflect, budget, sleepers, hoard, flood, wrap_and_forge)]
    four = [f"127.0.0.{i}" for i in range(2, 6)]
    workers += [
        threading.Thread(target=normal_http, args=(http_port, metrics_port), daemon=True),
        threading.Thread(target=silent, args=(http_port, four, 1024, "silent_held_http"), daemon=True),
        threading.Thread(target=silent, args=(metrics_port, ["127.0.0.2"], 64, "silent_held_metrics"), daemon=True),
        threading.Thread(target=claim, args=(http_port,), daemon=True),
    ]
    for w in workers:
        w.start()
    peaks = [0, 0, 0]
    started = time.time()
    print("   s  normal ok/fail  http ok/fail  silent open (http/metrics)  RSS MiB  threads  fds  victim datagrams  refused/accepted oversized")
    try:
        while time.time() - started < args.seconds:
            time.sleep(5)
            rss, threads, fds = proc_figures(server.pid)
            peaks = [max(p, v) for p, v in zip(peaks, (rss, threads, fds))]
            with LOCK:
                c = dict(COUNTS)
            print(f"{time.time() - started:4.0f}  {c['normal_ok']:6d}/{c['normal_fail']:<6d} {c['http_ok']:6d}/{c['http_fail']:<6d}"
                  f" {c['silent_held_http']:11d}/{c['silent_held_metrics']:<11d} {rss:8d} {threads:8d} {fds:4d}"
                  f"  {c['victim_datagrams']:16d}  {c['refused_requests']}/{c['accepted_oversized']}", flush=True)
    finally:
        STOP.set()
        for w in workers:
            w.join(timeout=70)
        time.sleep(3)
        rss, threads, fds = proc_figures(server.pid)
        server.terminate()
        server.wait(timeout=10)
        log.close()
    c = COUNTS
    total = c["normal_ok"] + c["normal_fail"]
    forged = sum(1 for line in open(log.name) if "10.9.9.9: forged" in line and line.startswith("2026-01-01"))
    print(f"normal client: {c['normal_ok']}/{total} tests succeeded "
          f"({100.0 * c['normal_ok'] / max(total, 1):.1f} %)")
    print(f"server peaks: RSS {peaks[0]} MiB, {peaks[1]} threads, {peaks[2]} descriptors; "
          f"3 s after the attacks: RSS {rss} MiB, {threads} threads, {fds} descriptors")
    print(f"reflection: {c['mirrors']} mirrors, {c['hellos']} hellos from addresses that never answer, "
          f"{c['cookies']} cookies back (28 bytes each); {c['victim_datagrams']} other datagrams ({c['victim_bytes']} bytes) "
          f"reached them; attacker errors {c['errors']}")
    http_total = c["http_ok"] + c["http_fail"]
    print(f"normal HTTP client: {c['http_ok']}/{http_total} served within 1 s, slowest {c['http_slowest_ms']} ms; "
          f"silent connections opened {c['silent_opened']}; "
          f"100 GiB claims answered 413: {c['claims_413']}, otherwise {c['claims_other']}")
    print(f"oversized requests refused {c['refused_requests']}, accepted {c['accepted_oversized']}; "
          f"forged log lines {forged}; server log {log.name}")


if __name__ == "__main__":
    main()
