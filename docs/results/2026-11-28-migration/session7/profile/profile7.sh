#!/bin/bash
# Issue 29, session 6: where the streamed relay's extra CPU goes with
# migration on. One arm per loadtest run (rag, 8 req/s, 40 s, 2 routers);
# the arm's first router is profiled (perf record, dwarf call graphs, 20 s)
# and its second counted (perf stat: task-clock, context switches,
# syscalls), each over the same 20 s, with the routers' request counters
# read before and after (requests per window).
# Usage: profile.sh BIN_DIR OUT_DIR NAME [on|off]
B=$1; O=$2; NAME=$3; ARM=$4; R=${5:-$B/prefix-router}
mkdir -p $O
args=(--policies cache_aware:1)
[ "$ARM" = off ] && args=(--policies cache_aware:1+nomig --variant nomig=--migration-limit=0)
nice -n -10 $B/loadtest run --workload rag --rate 8 --duration 40s --workers 3 "${args[@]}" \
  --scenario steady --router-bin $R --sim-bin $B/sim-worker \
  --out $O/$NAME > $O/$NAME.log 2>&1 &
run=$!
desc() { local p; for p in $(pgrep -P $1); do echo $p; desc $p; done; }
routers() { for p in $(desc $run); do [ "$(readlink /proc/$p/exe)" = "$R" ] && echo $p; done | sort -n; }
port() { ss -ltnpH | grep "pid=$1," | awk '{print $4}' | sed 's/.*://' | sort -n | head -1; }
reqs() { curl -s http://127.0.0.1:$(port $1)/metrics | awk '/^prefix_router_requests_total/ {s+=$2} END {print s+0}'; }
rs=""
while [ -z "$rs" ] && kill -0 $run 2>/dev/null; do rs=$(routers); sleep 0.5; done
r1=$rs
echo "$NAME: router $r1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
# The calibration (50 pairs, about 2 s) runs first; the 40 s workload after it.
sleep 8
a1=$(reqs $r1)
echo "window $(date -u +%T)"
perf record -F 4999 --call-graph dwarf,16384 -p $r1 -o $O/$NAME.perf.data -- sleep 20 2> $O/$NAME.perf.log &
perf stat -e task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter -p $r1 -o $O/$NAME.stat -- sleep 20
wait %2 2>/dev/null
sleep 1
b1=$(reqs $r1)
echo "requests in window: $((b1-a1))" | tee $O/$NAME.reqs
wait $run
echo "done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
