#!/usr/bin/env python3
"""STAMP: linerate's reflector and sender against stamp-suite's, in the same run.

1. Reflector rate. A load (crates/stamp/examples/stamp_blast.rs: open-mode test packets
   from 4 sockets, sent segmented and received with recvmmsg, so that one core offers
   hundreds of thousands a second) against `linerate serve --stamp` and against
   `stamp-suite --is-reflector --stateful-reflector`, interleaved, at each offered rate.
   Prints the answers' share and the reflector process's CPU seconds per million answers
   (/proc/PID/stat), with the kernel's UDP receive-buffer errors over the run beside them
   (/proc/net/snmp: what was dropped for want of buffer, at either end).
2. Sender timestamps. `linerate stamp` and stamp-suite's sender against linerate's
   reflector, 10 probes a second: the median round trip of each, and their difference.
3. An agent probing 100 peers. `linerate serve --key` as the agent, a mesh of 100 hosts
   that only reflect (100 loopback addresses, one linerate reflector answering them all),
   STAMP at 10/s each in 60 s windows (--window): the agent's CPU share over a window once every
   session runs back to back (the third). On loopback the agent's sends also carry the
   reflector's receiving (the kernel delivers in the sender's context): an upper bound.

    python3 bench/stamp.py                       # 3 rounds of 3 s at 100k, 200k, 300k/s
    python3 bench/stamp.py --rates 200000 --runs 5 --time 5

Needs stamp-suite (scripts/test builds it into ~/.cache/linerate-peers/stamp-suite; or
LINERATE_STAMP_SUITE). Builds linerate and the load in release mode.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

from common import LINERATE, ROOT, free_port

BLAST = os.path.join(ROOT, "target", "release", "examples", "stamp_blast")
TICK = os.sysconf("SC_CLK_TCK")


def stamp_suite():
    path = os.environ.get("LINERATE_STAMP_SUITE") or os.path.expanduser(
        "~/.cache/linerate-peers/stamp-suite/bin/stamp-suite")
    return path if os.path.exists(path) else None


def cpu_seconds(pid):
    """User and system CPU seconds of a process, its threads included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu_seconds(pid, name):
    """CPU seconds of a process's threads of one name (a live thread's own count)."""
    total = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                text = f.read()
        except OSError:
            continue
        if text[text.index("(") + 1:text.rindex(")")] == name:
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def rcvbuf_errors():
    with open("/proc/net/snmp") as f:
        lines = [l.split() for l in f if l.startswith("Udp:")]
    return int(lines[1][lines[0].index("RcvbufErrors")])


def free_udp_port():
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_reflector(kind, port, suite):
    if kind == "linerate":
        cmd = [LINERATE, "--no-store", "serve", "-q", "-p", str(free_port()), "--stamp",
               f"127.0.0.1:{port}", "--stamp-rate-per-source", "10000000",
               "--stamp-rate", "10000000"]
    else:
        cmd = [suite, "--is-reflector", "--local-addr", "127.0.0.1", "--local-port",
               str(port), "--stateful-reflector"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    return proc


def reflector_round(kind, rate, seconds, suite):
    port = free_udp_port()
    proc = start_reflector(kind, port, suite)
    try:
        errors, cpu = rcvbuf_errors(), cpu_seconds(proc.pid)
        out = subprocess.run([BLAST, f"127.0.0.1:{port}", str(rate), str(seconds)],
                             capture_output=True, text=True, check=True)
        cpu = cpu_seconds(proc.pid) - cpu
        errors = rcvbuf_errors() - errors
        result = json.loads(out.stdout)
    finally:
        proc.terminate()
        proc.wait()
    answered = result["answered"]
    return {
        "offered": result["sent"] / seconds,
        "answered_pps": answered / seconds,
        "answered_share": answered / max(result["sent"], 1),
        "cpu_s_per_million": cpu / max(answered, 1) * 1e6,
        "rcvbuf_errors": errors,
    }


def sender_round(suite, seconds):
    port = free_udp_port()
    proc = start_reflector("linerate", port, suite)
    try:
        count = str(int(10 * seconds))
        # Both at once, against one reflector: the same wake-ups and the same host.
        theirs = subprocess.Popen([suite, "--remote-addr", "127.0.0.1", "--remote-port", str(port),
                                   "--count", count, "--send-delay", "100ms", "--timeout", "1",
                                   "--output-format", "json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ours = subprocess.run([LINERATE, "--no-store", "stamp", f"127.0.0.1:{port}", "--rate", "10",
                               "-c", count, "-i", "0", "--json"],
                              capture_output=True, text=True, check=True)
        mine = json.loads(ours.stdout)["rtt_us"]["p50"]
        out, _ = theirs.communicate()
        summary = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        other = [s for s in summary if s.get("type") == "summary"][-1]["median_rtt_ms"] * 1e3
    finally:
        proc.terminate()
        proc.wait()
    return mine, other


def agent_round(peers, window_s):
    work = tempfile.mkdtemp(prefix="lr-stamp-bench-")
    key = os.path.join(work, "key")
    with open(key, "w") as f:
        f.write("the benchmark's shared key, for this run\n")
    agent_port, reflector_port = free_port(), free_udp_port()
    agent = subprocess.Popen([LINERATE, "--no-store", "serve", "-q", "--listen", "127.0.0.1",
                              "-p", str(agent_port), "--key", key, "--max-tests", "200"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reflector = subprocess.Popen([LINERATE, "--no-store", "serve", "-q", "-p", str(free_port()),
                                  "--stamp", f"0.0.0.0:{reflector_port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    mesh = [f'name = "bench"\nkey = "{key}"\n',
            f'[[host]]\nname = "agent"\naddress = "127.0.0.1:{agent_port}"\n']
    for i in range(peers):
        mesh.append(f'[[host]]\nname = "r{i}"\naddress = "127.0.{1 + i // 250}.{1 + i % 250}:{reflector_port}"\n'
                    'reflector = "stamp"\n')
    mesh.append(f'[[test]]\nname = "loss"\nrun = "stamp"\nrate = "10/s"\nreport = "{window_s}s"\n'
                '[[group]]\nname = "all"\nshape = "star"\ncenter = "agent"\ndirections = "one"\n'
                'tests = ["loss"]\n')
    path = os.path.join(work, "mesh.toml")
    with open(path, "w") as f:
        f.write("".join(mesh))
    try:
        # The first window's starts are spread over a window; from the second on, every
        # session runs back to back: the CPU is read over the third window.
        coordinator = subprocess.Popen([LINERATE, "--db", os.path.join(work, "db"), "mesh", "run",
                                        path, "--cycles", "4", "--json"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(2 * window_s + 2)
        before, started = cpu_seconds(agent.pid), time.monotonic()
        prober_before = thread_cpu_seconds(agent.pid, "stamp-prober")
        time.sleep(window_s)
        cpu, elapsed = cpu_seconds(agent.pid) - before, time.monotonic() - started
        prober = thread_cpu_seconds(agent.pid, "stamp-prober") - prober_before
        out, _ = coordinator.communicate(timeout=10 * window_s)
        rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        ok = sum(1 for r in rows if r.get("ok"))
        failed = [r.get("reason", "") for r in rows if "ok" in r and not r.get("ok")]
        if failed:
            print(f"{len(failed)} windows failed, e.g. {failed[0]}", file=sys.stderr)
    finally:
        for p in (agent, reflector):
            p.terminate()
            p.wait()
    return cpu, prober, elapsed, ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="100000,200000,300000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time", type=float, default=3.0)
    parser.add_argument("--peers", type=int, default=100)
    parser.add_argument("--parts", default="reflector,sender,agent")
    parser.add_argument("--window", type=int, default=60,
                        help="the agent's report window, seconds (the mesh's default is 60)")
    args = parser.parse_args()
    suite = stamp_suite()
    if not suite:
        sys.exit("stamp-suite is not installed: run scripts/test once, or set LINERATE_STAMP_SUITE")
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "linerate"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "linerate-stamp", "--example",
                    "stamp_blast"], cwd=ROOT, check=True)
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# {model}, {os.cpu_count()} CPUs, kernel {os.uname().release}")
    parts = args.parts.split(",")
    if "reflector" in parts:
        reflector_part(args, suite)
    if "sender" in parts:
        sender_part(args, suite)
    if "agent" in parts:
        print("\n## An agent probing", args.peers, f"reflectors at 10/s each, all the time ({args.window} s windows)")
        cpu, prober, elapsed, ok = agent_round(args.peers, args.window)
        print(f"agent CPU {cpu:.2f} s over {elapsed:.1f} s: {cpu / elapsed * 100:.2f}% of one CPU "
              f"(the probing thread {prober / elapsed * 100:.2f}%, the jobs' threads and "
              f"connections the rest); {ok} windows ok")


def reflector_part(args, suite):
    rates = [int(r) for r in args.rates.split(",")]
    results = {}
    for run in range(args.runs):
        for rate in rates:
            for kind in ("linerate", "stamp-suite"):
                results.setdefault((kind, rate), []).append(reflector_round(kind, rate, args.time, suite))
    print("\n## Reflector: answers to an offered rate (medians of", args.runs, "runs)")
    print(f"{'reflector':<12} {'offered/s':>10} {'answered/s':>11} {'answered':>9} {'CPU s/M':>8} {'rcvbuf err':>10}")
    for rate in rates:
        for kind in ("linerate", "stamp-suite"):
            rs = results[(kind, rate)]
            med = lambda k: statistics.median(r[k] for r in rs)
            print(f"{kind:<12} {med('offered'):>10.0f} {med('answered_pps'):>11.0f} "
                  f"{med('answered_share') * 100:>8.2f}% {med('cpu_s_per_million'):>8.2f} {med('rcvbuf_errors'):>10.0f}")
        a = statistics.median(r["answered_pps"] for r in results[("linerate", rate)])
        b = statistics.median(r["answered_pps"] for r in results[("stamp-suite", rate)])
        print(f"{'':<12} ratio linerate / stamp-suite answered: {a / max(b, 1):.2f}x")


def sender_part(args, suite):
    print("\n## Sender round trip against linerate's reflector, 10/s for", args.time * 5,
          "s, both senders at once")
    pairs = [sender_round(suite, args.time * 5) for _ in range(args.runs)]
    for mine, other in pairs:
        print(f"linerate p50 {mine:.1f} us, stamp-suite median {other:.1f} us, difference {mine - other:+.1f} us")
    diffs = [m - o for m, o in pairs]
    print(f"median difference {statistics.median(diffs):+.1f} us")


if __name__ == "__main__":
    main()
