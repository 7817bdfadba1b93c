import json,sys,glob,statistics,os
d=sys.argv[1]
res={}
for f in sorted(glob.glob(os.path.join(d,'cmp-*-*.jsonl'))):
    r_,v=os.path.basename(f)[4:-6].split('-')
    for l in open(f):
        r=json.loads(l)
        if r['db']!='pebble': continue
        res.setdefault((r['workload'],r['threads']),{}).setdefault(v,[]).append((int(r_),r['kvbuf_speedup']))
print('| workload | threads | HEAD kvbuf/pebble per round | fix kvbuf/pebble per round | fix/HEAD of the ratios (median) |')
print('| --- | --: | --- | --- | --: |')
for k in sorted(res,key=lambda k:(['load','a','b','c'].index(k[0]),k[1])):
    h=dict(res[k].get('head',[])); f=dict(res[k].get('fix',[]))
    rr=[f[i]/h[i] for i in sorted(h) if i in f]
    print(f"| {k[0]} | {k[1]} | {', '.join('%.2f'%h[i] for i in sorted(h))} | {', '.join('%.2f'%f[i] for i in sorted(f))} | {statistics.median(rr):.2f} ({min(rr):.2f}-{max(rr):.2f}) |" if rr else f"| {k[0]} | {k[1]} | {h} | {f} | - |")
