import json,glob,re,os,statistics as st
R={}
for f in glob.glob('[rc][0-9]*-l0c*.jsonl'):
    run,cfg=re.match(r'([rc]\d+)-(l0c\d+)',os.path.basename(f)).groups()
    for l in open(f):
        j=json.loads(l); R.setdefault((cfg,j['workload'],j['db']),[]).append((run,j))
def rp(j):
    o=j['ops'].get('READ'); return o['p99_ns']/1000 if o else None
out=[]
out.append('| workload | threshold | runs | kvbuf disk/user (min-max) | pebble disk/user | kvbuf ops/s | kvbuf ÷ pebble ops/s (min-max) | kvbuf read p99 µs (min-max) | pebble read p99 µs | kvbuf CPU/op µs |')
out.append('| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |')
for w in ['load','a','b','c']:
  for c in ['l0c2','l0c3','l0c4','l0c8']:
    k=R.get((c,w,'kvbuf'));
    if not k: continue
    p=dict(R[(c,w,'pebble')])
    def m(xs): xs=[x for x in xs if x is not None]; return (st.median(xs),min(xs),max(xs)) if xs else None
    def f(t,fmt='{:.3g}'): return '–' if not t else (fmt.format(t[0])+' ('+fmt.format(t[1])+'-'+fmt.format(t[2])+')')
    kd=m([j.get('disk_bytes_per_user_byte') for r,j in k]); pd=m([p[r].get('disk_bytes_per_user_byte') for r,j in k])
    ko=m([j['ops_per_sec']/1e3 for r,j in k]); ra=m([j['ops_per_sec']/p[r]['ops_per_sec'] for r,j in k])
    kr=m([rp(j) for r,j in k]); pr=m([rp(p[r]) for r,j in k]); cpu=m([j['cpu_ns_per_op']/1e3 for r,j in k])
    out.append(f"| {w.upper() if w!='load' else 'load'} | {c[3:]} | {len(k)} | {f(kd)} | {f(pd)} | {f(ko,'{:.0f}k') if ko else '–'} | {f(ra,'{:.2f}')} | {f(kr)} | {f(pr)} | {f(cpu)} |")
print('\n'.join(out))
