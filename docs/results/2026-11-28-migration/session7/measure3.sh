#!/bin/bash
# Issue 29, session 7, third build (837eabd: room made only when needed):
# rag steady on/off with the router after (2 runs) and before (bin-v16,
# 1 run) interleaved, then the profile of one router after. Same
# loadtest and sim-worker (bin-v16) as measure.sh.
cd /work/wt-relay7
B=/work/bin-v16
A=$PWD/target/release/prefix-router
O=${1:-/tmp/relay7/runs3}
mkdir -p $O
log() { echo "$1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $O/log; }
rag() { # name router
  log "start $1"
  nice -n -10 $B/loadtest run --workload rag --rate 8 --duration 40s --workers 3 \
    --policies cache_aware:2,cache_aware:2+nomig --variant nomig=--migration-limit=0 \
    --scenario steady --router-bin $2 --sim-bin $B/sim-worker \
    --out $O/$1 > $O/$1.log 2>&1
  log "end $1 rc $?"
}
rag rag3-after-1 $A
rag rag3-before-1 $B/prefix-router
rag rag3-after-2 $A
log "start profile"
docs/results/2026-11-28-migration/session7/profile/profile7.sh $B $O/prof after3-on on $A
log done
