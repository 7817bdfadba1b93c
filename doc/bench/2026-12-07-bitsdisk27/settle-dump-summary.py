import re,sys
txt=open(sys.argv[1]).read()
dumps=re.split(r'^=== ',txt,flags=re.M)[1:]
def size(s):
    m=re.match(r'([\d.]+)([KMG]?B)',s); v=float(m.group(1)); return v*{'B':1,'KB':1024,'MB':1024**2,'GB':1024**3}[m.group(2)]
out=[]
for d in dumps:
    what=d.split()[0]
    wb=int(re.search(r'write_bytes: (\d+)',d).group(1))
    secs=re.split(r'^--- ',d,flags=re.M)[1:]
    st={}
    for s in secs:
        name=' '.join(s.split('\n')[0].split()[1:])
        lv=[]
        for line in s.split('\n'):
            m=re.match(r'\s+(\d) \|\s+(\d+)\s+(\S+)\s+\S+\s+\d+ \|.*?\|\s+(\S+) \|\s+(\d+)\s+(\S+) \|\s+(\d+)\s+(\S+) \|\s+(\d+)\s+(\S+) \|',line)
            if m: lv.append((int(m.group(2)),size(m.group(3)),size(m.group(4)),size(m.group(6)),size(m.group(10))))
        wal=re.search(r'WAL: .*written: (\S+)',s); fl=re.search(r'Flushes: (\d+)',s); co=re.search(r'Compactions: (\d+)',s)
        st[name]=dict(lv=lv,wal=size(wal.group(1)),fl=int(fl.group(1)),co=int(co.group(1)))
    out.append((what,wb,st))
for i in range(0,len(out)-1):
    a,b=out[i],out[i+1]
    label='ROUND' if a[0]=='after-settle' else 'SETTLE'
    line=f"{i:3d} {label:6s} io={ (b[1]-a[1])/1e6:8.3f}MB"
    for n in b[2]:
        x,y=a[2][n],b[2][n]
        dw=y['wal']-x['wal']; df=y['fl']-x['fl']; dc=y['co']-x['co']
        dlw=[ (yy[4]-xx[4]) for xx,yy in zip(x['lv'],y['lv'])]
        if dw or df or dc or any(dlw):
            line+=f" | {n}: wal+{dw/1e6:.3f} fl+{df} co+{dc} written/lvl " + ','.join(f"L{j}:{v/1e6:.2f}" for j,v in enumerate(dlw) if v)
    print(line)
# print shape of engine 0 at end
print([ (l[0],round(l[1]/1e6,2)) for l in out[-1][2]['engine 0']['lv']])
