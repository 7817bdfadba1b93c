import json,sys,glob,os
d=sys.argv[1]
rows={}
for f in sorted(glob.glob(os.path.join(d,'cmp-*-*.jsonl'))):
    r_,v=os.path.basename(f)[4:-6].split('-')
    for l in open(f):
        r=json.loads(l)
        rows.setdefault((r['workload'],r['threads'],r['db']),[]).append(f"{v}{r_}: {r['ops_per_sec']/1000:.1f}k {r.get('cpu_ns_per_op',0)/1000:.1f}µs")
print('| workload | threads | engine | ops/s and CPU/op per run (variant, round) |')
print('| --- | --: | --- | --- |')
for k in sorted(rows,key=lambda k:(['load','a','b','c'].index(k[0]),k[1],k[2])):
    print(f"| {k[0]} | {k[1]} | {k[2]} | {'; '.join(sorted(rows[k]))} |")
