import sys,re,statistics as st
rows={}
order=[]
for line in open(sys.argv[1]):
    if not (line.startswith("PHASE") or line.startswith("BASE")): continue
    tag=line.split()[0]
    for k,v in re.findall(r'([\w+-]+)=([-\d.]+)',line):
        key=tag+":"+k
        if key not in rows: rows[key]=[]; order.append(key)
        rows[key].append(float(v))
for k in order:
    v=sorted(rows[k]); print("%-28s med %.3f  (%.3f-%.3f) n=%d"%(k,st.median(v),v[len(v)//4],v[3*len(v)//4],len(v)))
