#!/usr/bin/env python3
"""An adaptive jitter buffer written apart from linerate's, as docs/app.md describes it,
the reference its late loss and depth are checked against.

It reads one transit a line (arrival less send, nanoseconds, in arrival order) and
prints "LATE MEAN_DEPTH_MS FIXED_LATE COUNT": the datagrams the adaptive buffer (at most
MOST_MS deep) plays too late, its mean depth, and for comparison the datagrams a fixed
buffer of FIXED_MS set on the first datagram's transit plays too late.

usage: playout.py MOST_MS FIXED_MS < transits
"""
import sys

FRAME_MS = 20.0
EVERY = 50  # datagrams between two settings of the depth: a second of 20 ms frames
GAIN = 1.0 / 16.0


def judge(transits, most_ms, fixed_ms):
    least, most = FRAME_MS * 1e6, max(most_ms * 1e6, FRAME_MS * 1e6)
    mean = None
    deviation = 0.0
    played_at, depth = None, least
    late = fixed_late = 0
    depth_sum = 0.0
    first = transits[0] if transits else 0
    for n, transit in enumerate(transits, start=1):
        if mean is None:
            mean = transit
            played_at = transit
        if transit - played_at > depth:
            late += 1
        if transit - first > fixed_ms * 1e6:
            fixed_late += 1
        depth_sum += depth
        spread = abs(transit - mean)
        mean += (transit - mean) * GAIN
        deviation += (spread - deviation) * GAIN
        if n % EVERY == 0:
            played_at = mean
            depth = min(max(4.0 * deviation, least), most)
    count = len(transits)
    return late, (depth_sum / count / 1e6 if count else 0.0), fixed_late, count


def main():
    most_ms, fixed_ms = float(sys.argv[1]), float(sys.argv[2])
    transits = [int(line) for line in sys.stdin if line.strip()]
    late, depth_ms, fixed_late, count = judge(transits, most_ms, fixed_ms)
    print(late, f"{depth_ms:.6f}", fixed_late, count)


if __name__ == "__main__":
    main()
