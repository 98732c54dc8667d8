"""Helpers shared by the benchmark scripts."""
import glob, os, socket, subprocess, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINERATE = os.path.join(ROOT, "target", "release", "linerate")


def free_port():
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build():
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "linerate"], cwd=ROOT, check=True)


def machine():
    """The machine a figure was taken on: CPU model, CPUs, kernel (printed with every
    bench's figures; machines differ, so a lead on one kind says nothing of another)."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"machine: {model}, {os.cpu_count()} CPUs, Linux {os.uname().release}"


def start_postgres(work, port, *settings):
    """Debian's PostgreSQL on 127.0.0.1:`port`, its files in `work` (run as its own user),
    with `settings` ("name=value") besides: (server, URL, its bin directory), or
    (None, None, None) without root or without PostgreSQL."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if os.geteuid() != 0 or not bins:
        return None, None, None
    bin_dir = os.path.dirname(bins[-1])
    data = os.path.join(work, "data")
    subprocess.run(["chown", "postgres:postgres", work], check=True)
    subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(bin_dir, "initdb"),
                    "-D", data, "-U", "linerate", "-A", "trust"], check=True,
                   capture_output=True)
    extra = [arg for setting in settings for arg in ("-c", setting)]
    server = subprocess.Popen(
        ["setpriv", "--reuid", "postgres", "--regid", "postgres", "--clear-groups", "--",
         os.path.join(bin_dir, "postgres"), "-D", data, "-p", port, "-k", work,
         "-c", "listen_addresses=127.0.0.1", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(150):
        ready = subprocess.run([os.path.join(bin_dir, "pg_isready"), "-h", "127.0.0.1",
                                "-p", port], capture_output=True)
        if ready.returncode == 0:
            return server, f"postgres://linerate@127.0.0.1:{port}/postgres", bin_dir
        time.sleep(0.2)
    server.terminate()
    return None, None, None
