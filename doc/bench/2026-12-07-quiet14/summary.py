"""Summarizes quiet14's kvtool runs: per revision and row, the KVBUF SPEEDUP
(baseline time / kvbuf's, median over a run's rounds) of each run, with the
median and range over runs. Usage: python3 summary.py DIR BASE HEAD"""
import sys, glob, re, statistics
d, revs = sys.argv[1], sys.argv[2:]
rows = [("w1", "W1/lookup-without-pending-changes", "raw"), ("w1", "W1/lookup-sparse", "raw"),
        ("w1", "W1/lookup-with-pending-changes", "atomic-words"),
        ("w7", "W7/lookup-under-writes", "reads-without-writer"),
        ("w6", "W6/flush-bits-1m", None)]
for v in revs:
    print("revision", v)
    for pre, w, b in rows:
        found = {}
        for f in sorted(glob.glob(f"{d}/{pre}-{v}-run*.txt")):
            for line in open(f):
                p = line.split()
                if len(p) > 2 and p[0] == w and (b is None or p[1] == b):
                    m = re.search(r"\s(\d+\.\d+)x \(", line)
                    if m: found.setdefault(p[1], []).append(float(m.group(1)))
        for impl, vals in found.items():
            s = sorted(vals)
            print(f"  {w:36s} {impl}/kvbuf  median {statistics.median(s):.2f} ({s[0]:.2f}-{s[-1]:.2f}) over {len(s)} runs: {vals}")
