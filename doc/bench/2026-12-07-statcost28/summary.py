#!/usr/bin/env python3
"""Per-round figures of BenchmarkMissRead for HEAD (head) and the scratch
build without the judgement (nojudge): each round's median ratios of the
engine rows to pebble and pebble-iter, and HEAD over nojudge (medians of
each build's rounds, and of adjacent-pair ratios)."""
import glob, re, statistics, sys
keys = sys.argv[1] if len(sys.argv) > 1 else "hot"
mets = ["kvbuf/pebble-iter-median", "kvbuf/pebble-median",
        "kvbuf-no-tier/pebble-median", "pebble-iter/pebble-median",
        "kvbuf-ns/get", "pebble-iter-ns/get"]
rows = []
for f in sorted(glob.glob(f"r*-*-{keys}.txt"), key=lambda p: int(re.match(r"r(\d+)", p).group(1))):
    rnd, build = re.match(r"r(\d+)-(\w+)-", f).groups()
    txt = open(f).read()
    m = re.search(r"^BenchmarkMissRead/keys=\w+\S*\s+\d+\s+\d+ ns/op(.*)$", txt, re.M)
    if not m:
        continue
    toks = m.group(1).split()
    vals = {toks[i + 1]: float(toks[i]) for i in range(0, len(toks) - 1, 2)}
    load = open(f.replace(".txt", ".uptime")).read().split("load average:")[1].strip()
    rows.append((int(rnd), build, vals, load))
print("round build " + " ".join(mets) + " load")
for r, b, v, l in rows:
    print(r, b, " ".join(f"{v[m]:.4g}" for m in mets), "|", l)
for m in mets[:3]:
    h = [v[m] for _, b, v, _ in rows if b == "head"]
    n = [v[m] for _, b, v, _ in rows if b == "nojudge"]
    if h and n:
        print(f"{m}: head median {statistics.median(h):.4f} ({len(h)} rounds, {min(h):.3f}-{max(h):.3f}), "
              f"nojudge median {statistics.median(n):.4f} ({len(n)}, {min(n):.3f}-{max(n):.3f}), "
              f"head/nojudge {statistics.median(h)/statistics.median(n):.4f}")
