#!/bin/bash
# Counts over a window of a running loadtest: each router's /metrics
# (HTTP requests by route, script calls by script) and Valkey's
# commandstats, before and after. $1 = loadtest pid, $2 = window s
LT=$1; W=${2:-20}; T=$(mktemp -d)
desc() { local anc=$1; while [ "$anc" -gt 1 ]; do [ "$anc" = "$LT" ] && return 0; anc=$(awk '{print $4}' /proc/$anc/stat 2>/dev/null || echo 1); done; return 1; }
PORTS=""
for p in $(pgrep -f "prefix-router serve"); do
  desc $p || continue
  PORTS="$PORTS $(tr '\0' ' ' < /proc/$p/cmdline | grep -o -- '--listen [0-9.:]*' | grep -o '[0-9]*$')"
done
VPORT=""
for p in $(pgrep -x valkey-server); do desc $p && VPORT=$(tr '\0' ' ' < /proc/$p/cmdline | grep -o ':[0-9]*' | head -1 | tr -d :); done
snap() { for port in $PORTS; do curl -s http://127.0.0.1:$port/metrics | grep -E '^prefix_router_(http_requests_total|script_calls_total)' | sed "s/^/$port /"; done; }
snap > $T/m0; [ -n "$VPORT" ] && valkey-cli -p $VPORT info commandstats > $T/v0
sleep $W
snap > $T/m1; [ -n "$VPORT" ] && valkey-cli -p $VPORT info commandstats > $T/v1
echo "window ${W}s routers:$PORTS valkey:$VPORT"
python3 - $T <<'PY'
import sys,re,collections
t=sys.argv[1]
def load(f):
    d=collections.Counter()
    for line in open(f):
        port,rest=line.split(' ',1)
        name,val=rest.rsplit(' ',1)
        m=re.match(r'(\w+)\{(.*)\}',name)
        labels=dict(re.findall(r'(\w+)="([^"]*)"',m.group(2)))
        if m.group(1)=='prefix_router_http_requests_total':
            d[('http',labels['route'])]+=float(val)
        else:
            d[('script',labels['script'])]+=float(val)
    return d
a,b=load(t+'/m0'),load(t+'/m1')
delta={k:b[k]-a.get(k,0) for k in b if b[k]-a.get(k,0)>0}
client=sum(v for (kind,r),v in delta.items() if kind=='http' and r.startswith('/v1/'))
print(f"client requests {client:.0f}")
internal=0
for (kind,r),v in sorted(delta.items()):
    if kind=='http':
        print(f"  http {r:32s} {v:7.0f}  per client req {v/max(client,1):.3f}")
        if r.startswith('/internal/'): internal+=v
print(f"internal http per client req {internal/max(client,1):.3f}")
scripts=0
for (kind,r),v in sorted(delta.items()):
    if kind=='script':
        scripts+=v
        print(f"  script {r:28s} {v:7.0f}  per client req {v/max(client,1):.3f}")
push=sum(v for (kind,r),v in delta.items() if kind=='script' and r in('stored.lua','evict.lua','apply_events.lua'))
print(f"script calls per client req {scripts/max(client,1):.3f}; push scripts (stored+evict+apply_events) per client req {push/max(client,1):.3f}")
def cs(f):
    d={}
    for line in open(f):
        m=re.match(r'cmdstat_([^:]*):calls=(\d+)',line)
        if m: d[m.group(1)]=int(m.group(2))
    return d
try:
    v0,v1=cs(t+'/v0'),cs(t+'/v1')
    for k in sorted(v1):
        dd=v1[k]-v0.get(k,0)
        if dd>0: print(f"  valkey {k:20s} {dd:7d}  per client req {dd/max(client,1):.3f}")
except FileNotFoundError: pass
PY
rm -rf $T
