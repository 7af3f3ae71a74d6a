#!/bin/bash
# When a sim's heartbeats go, relative to its pushes: strace one sim of a
# running loadtest for $2 s and read its request lines. $1 = loadtest pid
LT=$1; W=${2:-20}; T=$(mktemp -d)
desc() { local anc=$1; while [ "$anc" -gt 1 ]; do [ "$anc" = "$LT" ] && return 0; anc=$(awk '{print $4}' /proc/$anc/stat 2>/dev/null || echo 1); done; return 1; }
for p in $(pgrep -x sim-worker); do desc $p && { SIM=$p; break; }; done
echo "sim pid $SIM"
timeout $W strace -f -tt -e trace=write,writev,sendto,sendmsg -s 48 -p $SIM -o $T/st 2>/dev/null
python3 - $T/st <<'PY'
import sys,re
ev=[]
for line in open(sys.argv[1]):
    m=re.search(r'(\d+):(\d+):(\d+\.\d+) .*POST /internal/(\w+(?:/\w+)?)',line)
    if m:
        t=int(m.group(1))*3600+int(m.group(2))*60+float(m.group(3))
        ev.append((t,m.group(4)))
hb=[t for t,k in ev if k=='heartbeat']
push=[t for t,k in ev if k in('events','stored','eviction')]
from collections import Counter
print("requests:",dict(Counter(k for _,k in ev)))
def last_push_before(t):
    b=[p for p in push if p<=t]
    return t-b[-1] if b else None
gaps=[last_push_before(t) for t in hb]
gaps=[g for g in gaps if g is not None]
n=len(gaps)
for lim in (0.1,0.2,0.5,1.0):
    k=sum(1 for g in gaps if g<=lim)
    print(f"heartbeats with a push in the {lim*1000:.0f} ms before: {k}/{n}" + (f" ({100*k/n:.0f}%)" if n else ""))
PY
rm -rf $T
