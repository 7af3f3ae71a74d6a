import re,sys,os,glob
rows=[]
for d in sorted(glob.glob('/tmp/push8/runs/1tok-*/report.md'), key=os.path.getmtime):
    name=d.split('/')[-2]
    t=open(d).read()
    steady=[l for l in t.splitlines() if l.startswith('| cache_aware ×4 | 4 |')]
    cpu=[l for l in t.splitlines() if l.startswith('| cache_aware ×4 |') and '%' in l.split('|')[2]]
    s=[c.strip() for c in steady[0].split('|')[1:-1]]
    c=[x.strip() for x in cpu[0].split('|')[1:-1]]
    # steady: policy routers requests failed hit ttft50 ...
    # cpu: policy routers_all busiest valkey valkey_ms prim prim_ratio routers_ms decision sims haproxy haproxy_ms loadtest machine
    r_ms=float(c[7]); h_ms=float(c[11])
    print(f"| {name} | {r_ms:.2f} | {h_ms:.2f} | {r_ms-h_ms:.2f} | {c[4]} | {c[8]} | {s[3]} | {s[4]} | {s[5]} | {c[13]} |")
