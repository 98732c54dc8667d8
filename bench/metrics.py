#!/usr/bin/env python3
"""What a large mesh's metrics and grid cost: a board of N hosts (full mesh, 4 tests:
TCP and UDP streams, rr and crr with their histograms) from
crates/metrics/examples/scrape_scale.rs, which prints the scrape's and the grid JSON's time
and size; then headless Chromium loads its grid, timed against the grid of 2 hosts (the
browser's own start), with the page's own measure of its render script.

    python3 bench/metrics.py            # 100 hosts
    python3 bench/metrics.py --hosts 50

Needs chromium (apt-get install chromium).
"""
import argparse, os, re, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "target", "release", "examples", "scrape_scale")


def load(url, profile):
    start = time.time()
    out = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                          f"--user-data-dir={profile}", "--window-size=1400,1000",
                          "--dump-dom", url], capture_output=True, text=True, timeout=120)
    wall = time.time() - start
    cells = out.stdout.count('class="cell')
    m = re.search(r'data-render-ms="([0-9.]+)"', out.stdout)
    return wall, cells, float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("chromium"):
        sys.exit("chromium is not installed (apt-get install chromium)")
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "linerate-metrics",
                    "--example", "scrape_scale"], cwd=ROOT, check=True)
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} CPUs")
    big = subprocess.Popen([EXAMPLE, str(args.hosts), "--serve", "127.0.0.1:9481", "600"],
                           stdout=subprocess.PIPE, text=True)
    small = subprocess.Popen([EXAMPLE, "2", "--serve", "127.0.0.1:9482", "600"],
                             stdout=subprocess.DEVNULL)
    profile = tempfile.mkdtemp(prefix="linerate-chromium-")
    try:
        lines = []
        for line in big.stdout:
            lines.append(line.rstrip())
            if line.startswith("serving"):
                break
        print("\n".join(lines))
        time.sleep(0.5)
        walls, renders, bases = [], [], []
        for _ in range(args.runs):
            base, _, _ = load("http://127.0.0.1:9482/", profile)
            wall, cells, render = load("http://127.0.0.1:9481/", profile)
            bases.append(base)
            walls.append(wall)
            renders.append(render)
        # The scrape as Prometheus makes it, over HTTP: OpenMetrics, gzip (the first
        # scrape encodes every series; those after it only the changed).
        scrape = ["curl", "-s", "-o", "/dev/null", "-H", "Accept: application/openmetrics-text;version=1.0.0",
                  "-H", "Accept-Encoding: gzip", "-w", "%{time_total} %{size_download}",
                  "http://127.0.0.1:9481/metrics"]
        timed = [subprocess.run(scrape, capture_output=True, text=True).stdout.split() for _ in range(6)]
        first, rest = timed[0], [float(t) for t, _ in timed[1:]]
        print(f"scrape over HTTP with gzip (curl): first {float(first[0]) * 1e3:.0f} ms, then a median of "
              f"{statistics.median(rest) * 1e3:.0f} ms (max {max(rest) * 1e3:.0f}), {int(timed[-1][1]) / 1048576:.2f} MiB")
        print(f"grid of {args.hosts} x {args.hosts} in headless Chromium ({cells} cells): "
              f"page served, parsed, drawn and laid out in {statistics.median(walls) - statistics.median(bases):.2f} s "
              f"beyond a 2-host grid's {statistics.median(bases):.2f} s; its render script {statistics.median(renders):.0f} ms "
              f"(medians of {args.runs})")
    finally:
        big.kill()
        small.kill()
        big.wait()
        small.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
