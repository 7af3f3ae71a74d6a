#!/bin/bash
# Issue 29 / 27, session 6: the relay's CPU after the change. Run from
# /work/wt-relay after
#   cargo build --release --locked -p prefix-router -p sim-worker -p loadtest
# (1) rag steady, migration on against --migration-limit 0, three runs;
# (2) the Mooncake trace streamed, the router before (/work/bin-v15, main
# at eaf6fd4) and after (this branch), interleaved, two runs each. The same
# loadtest and sim-worker binaries (this branch's) in every run; only the
# router differs.
cd /work/wt-relay
T=target/release
O=${1:-/tmp/relay6/runs}
mkdir -p $O
log() { echo "$1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $O/log; }
rag() {
  log "start rag-$1"
  nice -n -10 $T/loadtest run --workload rag --rate 8 --duration 40s --workers 3 \
    --policies cache_aware:2,cache_aware:2+nomig --variant nomig=--migration-limit=0 \
    --scenario steady --router-bin $PWD/$T/prefix-router --sim-bin $PWD/$T/sim-worker \
    --out $O/rag-$1 > $O/rag-$1.log 2>&1
  log "end rag-$1 rc $?"
}
trace() { # name router
  log "start $1"
  nice -n -10 $T/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 \
    --policies cache_aware:4 --limit 2000 --router-bin $2 --sim-bin $PWD/$T/sim-worker \
    --out $O/$1 > $O/$1.log 2>&1
  log "end $1 rc $?"
}
for i in 1 2; do
  trace stream-before-$i /work/bin-v15/prefix-router
  trace stream-after-$i $PWD/$T/prefix-router
done
for i in 1 2 3; do rag $i; done
log done
