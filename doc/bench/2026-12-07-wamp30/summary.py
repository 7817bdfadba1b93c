import json,sys
for f in sys.argv[1:]:
    for l in open(f):
        r=json.loads(l)
        s=r.get('store') or {}
        p99=r['ops'].get('READ',{}).get('p99_ns',0)/1e3
        print(f"{f:10s} {r['workload']:5s} {r['db']:6s} ops/s {r['ops_per_sec']:9.0f} disk/user {r.get('disk_bytes_per_user_byte',0):7.2f} fl {s.get('flushes','-')} comp {s.get('compactions','-')} ing {s.get('ingests','-')} compMB {s.get('compacted_bytes',0)/1e6:7.1f} wrMB {s.get('written_bytes',0)/1e6:7.1f} readp99 {p99:.1f}us")
