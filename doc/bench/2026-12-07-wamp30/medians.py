# medians.py: the per-run ratios kvbuf / pebble (ops/s, and disk bytes per
# user byte) of workloads A and B, by configuration, with their median.
import json, statistics
cfg = {
    "tier left out of pebble's cache (9404f44)": [1, 3, 5],
    "fair caches, interval flushes (67a6603, 52feacb)": [2, 4, 7, 9, 11],
    "fair caches, host log only: -p kvbuf.flush_interval=-1s (52feacb)": [6, 8, 10, 12],
}
for name, runs in cfg.items():
    print(name)
    for wl in ("a", "b"):
        ops, disk = [], []
        for r in runs:
            rows = {j["db"]: j for j in map(json.loads, open(f"r{r}.jsonl")) if j["workload"] == wl}
            k, p = rows["kvbuf"], rows["pebble"]
            ops.append(k["ops_per_sec"] / p["ops_per_sec"])
            disk.append(k["disk_bytes_per_user_byte"] / p["disk_bytes_per_user_byte"])
        f = lambda xs: f"median {statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f}): " + ", ".join(f"{x:.2f}" for x in xs)
        print(f"  {wl}: ops/s {f(ops)}")
        print(f"  {wl}: disk bytes per user byte {f(disk)}")
