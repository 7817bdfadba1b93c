# Makes cmp-table.md from run.sh's cmp-R-V.jsonl files in directory argv[1]:
# kvbuf over pebble per round for HEAD and the fix, then every run's ops/s
# and CPU per op. Usage: python3 summ.py . > cmp-table.md
import json,sys,glob,statistics,os
d=sys.argv[1]
res={}
rows={}
for f in sorted(glob.glob(os.path.join(d,'cmp-*-*.jsonl'))):
    r_,v=os.path.basename(f)[4:-6].split('-')
    for l in open(f):
        r=json.loads(l)
        rows.setdefault((r['workload'],r['threads'],r['db']),[]).append(f"{v}{r_}: {r['ops_per_sec']/1000:.1f}k {r.get('cpu_ns_per_op',0)/1000:.1f}µs")
        if r['db']!='pebble': continue
        res.setdefault((r['workload'],r['threads']),{}).setdefault(v,[]).append((int(r_),r['kvbuf_speedup']))
print('| workload | threads | HEAD kvbuf/pebble per round | fix kvbuf/pebble per round | fix/HEAD of the ratios (median) |')
print('| --- | --: | --- | --- | --: |')
for k in sorted(res,key=lambda k:(['load','a','b','c'].index(k[0]),k[1])):
    h=dict(res[k].get('head',[])); f=dict(res[k].get('fix',[]))
    rr=[f[i]/h[i] for i in sorted(h) if i in f]
    print(f"| {k[0]} | {k[1]} | {', '.join('%.2f'%h[i] for i in sorted(h))} | {', '.join('%.2f'%f[i] for i in sorted(f))} | {statistics.median(rr):.2f} ({min(rr):.2f}-{max(rr):.2f}) |" if rr else f"| {k[0]} | {k[1]} | {h} | {f} | - |")
print()
print('| workload | threads | engine | ops/s and CPU/op per run (variant, round) |')
print('| --- | --: | --- | --- |')
for k in sorted(rows,key=lambda k:(['load','a','b','c'].index(k[0]),k[1],k[2])):
    print(f"| {k[0]} | {k[1]} | {k[2]} | {'; '.join(sorted(rows[k]))} |")
