#!/usr/bin/env python3
"""The one-shot CLI of one or two builds against raw minimal bwrap, side by side.

Runs, N rounds, one run of each way per round (so load that comes and goes
on a shared machine touches all alike): raw minimal bwrap (every namespace,
/usr and the merged-/usr links, /proc, /dev, the workspace) and
`CLI exec -- /bin/true` for each CLI named. Prints each way's wall-time
p50 and CPU p50 (user + system of everything the run waited for) with their
ratios to raw minimal bwrap, and with two CLIs the second over the first.
The workspace is a fresh temporary directory. Usage:

    scripts/oneshot-compare.py N NAME CLI [NAME CLI]

e.g. scripts/oneshot-compare.py 30 before /tmp/old/aleph-sandbox after "$PWD/bin/aleph-sandbox"
"""
import atexit, os, resource, shutil, subprocess, sys, tempfile, time, statistics
if len(sys.argv) < 4 or len(sys.argv) % 2:
    sys.exit(__doc__)
ws = tempfile.mkdtemp()
atexit.register(shutil.rmtree, ws, True)
def minimal():
    a = ["bwrap", "--unshare-all", "--die-with-parent", "--clearenv", "--ro-bind", "/usr", "/usr"]
    for d in ["bin", "lib", "lib64", "sbin"]:
        p = "/" + d
        if os.path.islink(p): a += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p): a += ["--ro-bind", p, p]
    return a + ["--proc", "/proc", "--dev", "/dev", "--bind", ws, ws, "--chdir", ws, "--", "/bin/true"]
ways = {"raw_minimal": minimal()}
for name, cli in zip(sys.argv[2::2], sys.argv[3::2]):
    ways[name] = [cli, "exec", "--", "/bin/true"]
n = int(sys.argv[1])
wall = {k: [] for k in ways}; cpu = {k: [] for k in ways}
for i in range(n):
    for k, argv in ways.items():
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN); t0 = time.perf_counter()
        subprocess.run(argv, check=True, cwd=ws, stdout=subprocess.DEVNULL)
        t1 = time.perf_counter(); r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall[k].append(t1 - t0); cpu[k].append((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime))
m = {k: statistics.median(v) for k, v in wall.items()}; c = {k: statistics.median(v) for k, v in cpu.items()}
for k in ways:
    print("%-12s wall p50 %7.1f ms (%5.2fx minimal)  cpu p50 %6.1f ms (%5.2fx minimal)" % (k, m[k]*1e3, m[k]/m["raw_minimal"], c[k]*1e3, c[k]/c["raw_minimal"]))
names = list(ways)[1:]
if len(names) == 2:
    a, b = names
    print("%s/%s: wall %.2f, cpu %.2f" % (b, a, m[b]/m[a], c[b]/c[a]))
