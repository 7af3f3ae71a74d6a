#!/bin/bash
# Issue 29, session 7: the lazy relay (no serde per event, one frame per
# read). Run from /work/wt-relay7 after
#   cargo build --release --locked -p prefix-router -p sim-worker -p loadtest
# Only the router differs between before (/work/bin-v16: main at 0fb2fa7)
# and after (this branch); loadtest and sim-worker are bin-v16's in every
# run. (1) the Mooncake trace streamed, before and after interleaved, two
# each; (2) rag steady, migration on against --migration-limit 0, the
# router after three times and before twice, interleaved.
cd /work/wt-relay7
B=/work/bin-v16
A=$PWD/target/release/prefix-router
O=${1:-/tmp/relay7/runs}
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
trace() { # name router
  log "start $1"
  nice -n -10 $B/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 \
    --policies cache_aware:4 --limit 2000 --router-bin $2 --sim-bin $B/sim-worker \
    --out $O/$1 > $O/$1.log 2>&1
  log "end $1 rc $?"
}
rag rag-after-1 $A
rag rag-before-1 $B/prefix-router
rag rag-after-2 $A
rag rag-before-2 $B/prefix-router
rag rag-after-3 $A
for i in 1 2; do
  trace stream-before-$i $B/prefix-router
  trace stream-after-$i $A
done
log done
