#!/bin/bash
# Session 7 final measurements: before = bin-v16 (session 6's final code), after = bin-v17 (merged main, session 7).
OLD=/work/bin-v16
B=/work/bin-v17
R=/work/runs/v17
mkdir -p $R
log() { echo "$1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log; }
trace() { n=$1; bin=$2; shift 2
  log "start $n"
  nice -n -10 $B/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 \
    --policies cache_aware:4 --limit 2000 --sim-bin $B/sim-worker --router-bin $bin --out $R/$n "$@" \
    > $R/$n.stdout 2> $R/$n.stderr
  log "end $n rc $?"; }
rag() { n=$1; bin=$2
  log "start $n"
  nice -n -10 $B/loadtest run --workload rag --rate 8 --duration 40s --workers 3 \
    --policies cache_aware:2,cache_aware:2+nomig --variant nomig=--migration-limit=0 --scenario steady \
    --router-bin $bin --sim-bin $B/sim-worker --out $R/$n > $R/$n.stdout 2> $R/$n.stderr
  log "end $n rc $?"; }
trace 1tok-before-1 $OLD/prefix-router --max-output-tokens 1
trace 1tok-after-1 $B/prefix-router --max-output-tokens 1
trace 1tok-before-2 $OLD/prefix-router --max-output-tokens 1
trace 1tok-after-2 $B/prefix-router --max-output-tokens 1
trace stream-before-1 $OLD/prefix-router
trace stream-after-1 $B/prefix-router
rag rag-after-1 $B/prefix-router
rag rag-before-1 $OLD/prefix-router
rag rag-after-2 $B/prefix-router
rag rag-after-3 $B/prefix-router
trace 1tok-after-t1 $B/prefix-router --max-output-tokens 1 --router-arg=--async-threads=1
trace 1tok-issue-before /work/bin-before/prefix-router --max-output-tokens 1
log done
