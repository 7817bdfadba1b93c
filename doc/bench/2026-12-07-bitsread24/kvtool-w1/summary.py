import sys, glob, re, statistics
d = sys.argv[1]
rows = [("W1/lookup-without-pending-changes", "raw"), ("W1/lookup-sparse", "raw"), ("W1/lookup-with-pending-changes", "atomic-words")]
for v in ["main", "head"]:
    print("revision", v)
    for w, b in rows:
        vals = []
        for f in sorted(glob.glob(f"{d}/kvtool-{v}-run*.txt")):
            for line in open(f):
                p = line.split()
                if len(p) > 2 and p[0] == w and p[1] == b:
                    m = re.search(r"\s(\d+\.\d+)x \(", line)
                    if m: vals.append(float(m.group(1)))
        if vals:
            s = sorted(vals)
            print(f"  {w:36s} {b}/kvbuf  median {statistics.median(s):.2f} ({s[0]:.2f}-{s[-1]:.2f}) over {len(s)} runs: {vals}")
