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
