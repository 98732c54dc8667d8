"""Helpers shared by the benchmark scripts."""
import os, socket, subprocess

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
