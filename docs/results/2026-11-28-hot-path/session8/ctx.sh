#!/bin/bash
# per-thread context switches of the routers of a running loadtest, and Valkey's commandstats: $1 = loadtest pid, $2 = window s
LT=$1; W=${2:-20}; T=$(mktemp -d)
desc() { local p=$1 anc=$1; while [ "$anc" -gt 1 ]; do [ "$anc" = "$LT" ] && return 0; anc=$(awk '{print $4}' /proc/$anc/stat 2>/dev/null || echo 1); done; return 1; }
snap() { for p in $(pgrep -f "prefix-router serve" ); do
  desc $p || continue
  for t in /proc/$p/task/*; do
    echo "$p $(basename $t) $(tr ' ' '_' < $t/comm) $(awk '/^voluntary_ctxt/{v=$2}/^nonvoluntary_ctxt/{n=$2}END{print v, n}' $t/status) $(awk '{print $14+$15}' $t/stat)"
  done; done; }
VPORT=""
for p in $(pgrep -x valkey-server); do desc $p && VPORT=$(tr '\0' ' ' < /proc/$p/cmdline | grep -o ':[0-9]*' | head -1 | tr -d :); done
[ -n "$VPORT" ] && valkey-cli -p $VPORT info commandstats > $T/v0
snap > $T/s0; sleep $W; snap > $T/s1
[ -n "$VPORT" ] && valkey-cli -p $VPORT info commandstats > $T/v1
echo "window ${W}s"
join <(awk '{print $1"-"$2, $3, $4, $5, $6}' $T/s0 | sort) <(awk '{print $1"-"$2, $3, $4, $5, $6}' $T/s1 | sort) | awk '{k=$2; n[k]+=$7-$3; nv[k]+=$8-$4; ti[k]+=$9-$5} END {for (k in n) printf "%-20s vol %6d nonvol %6d cpu_ticks %5d\n", k, n[k], nv[k], ti[k]}'
join <(awk '{print $1"-"$2, $3, $4, $5, $6}' $T/s0 | sort) <(awk '{print $1"-"$2, $3, $4, $5, $6}' $T/s1 | sort) | awk '{printf "thread %-16s %-16s vol %6d nonvol %6d ticks %4d\n", $1, $2, $7-$3, $8-$4, $9-$5}'
if [ -n "$VPORT" ]; then
  echo "valkey commandstats delta (calls):"
  join -t' ' <(grep cmdstat $T/v0 | sed 's/cmdstat_\([^:]*\):calls=\([0-9]*\).*/\1 \2/' | sort) <(grep cmdstat $T/v1 | sed 's/cmdstat_\([^:]*\):calls=\([0-9]*\).*/\1 \2/' | sort) | awk '{d=$3-$2; if (d>0) print "  "$1, d}'
  grep -h "^cmdstat_\|^# " $T/v1 | head -0
fi
rm -rf $T
