#!/usr/bin/env python3
# Disk bytes per user byte over all rounds, from kvtool bench --json files:
# the mean of the per-round figures, which is total disk bytes over total
# user bytes when every round carries the same user bytes (true of every
# row with a disk figure: a fixed number of operations per round). Prints,
# per row, the recorded figure (disk_bytes_per_user_byte: a median of the
# per-round figures in the files here, labelled "median" when it is one;
# the harness now records the figure over all rounds, labelled
# "recorded"), the mean over rounds and the per-round min-max.
# Usage: python3 disk-means.py FILE.json...
import json, statistics, sys

for path in sys.argv[1:]:
    print(path)
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        rounds = r.get("disk_bytes_per_user_byte_rounds")
        if not rounds:
            continue
        rec = r["disk_bytes_per_user_byte"]
        kind = "median" if rec == statistics.median(rounds) else "recorded"
        print("  %-26s %-40s %s %-7.3g mean %-7.3g min-max %.3g-%.3g" % (
            r["workload"], r["impl"], kind, rec,
            statistics.mean(rounds), min(rounds), max(rounds)))
