#!/usr/bin/env python3
"""Where a one-shot `aleph-sandbox exec` spends its time.

Runs `aleph-sandbox exec [FLAGS] -- /bin/true` N times with ALEPH_SANDBOX_TRACE
set (internal/starttrace: the CLI and the driver append timestamped marks to one
file) and prints, per mark, the median time since the CLI was started, and the
share of the whole run. Usage:

    scripts/start-trace.py [--cli bin/aleph-sandbox] [--n 20] [-- EXEC FLAGS...]
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "bin", "aleph-sandbox"))
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("flags", nargs="*")
    a = ap.parse_args()
    rows = collections.defaultdict(list)
    order = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.n):
            path = os.path.join(tmp, "trace-%d" % i)
            env = dict(os.environ, ALEPH_SANDBOX_TRACE=path)
            t0 = time.time_ns()
            r = subprocess.run([a.cli, "exec"] + a.flags + ["--", "/bin/true"], env=env)
            t1 = time.time_ns()
            if r.returncode != 0:
                sys.exit("exec exited %d" % r.returncode)
            marks = []
            with open(path) as f:
                for line in f:
                    ts, _pid, who, ev = line.rstrip("\n").split(" ", 3)
                    marks.append((int(ts), who + ": " + ev))
            marks.sort()
            marks = [(t0, "CLI started (fork)")] + marks + [(t1, "CLI exited")]
            seen = collections.Counter()
            for ts, ev in marks:
                seen[ev] += 1
                key = ev if seen[ev] == 1 else "%s (#%d)" % (ev, seen[ev])
                if key not in order:
                    order.append(key)
                rows[key].append((ts - t0) / 1e6)

    def med(v):
        v = sorted(v)
        return v[len(v) // 2]

    total = med(rows["CLI exited"])
    print("%10s %7s  %s" % ("p50 ms", "share", "mark (n=%d)" % a.n))
    for k in sorted(order, key=lambda k: med(rows[k])):
        print("%10.2f %6.0f%%  %s" % (med(rows[k]), 100 * med(rows[k]) / total, k))


if __name__ == "__main__":
    main()
