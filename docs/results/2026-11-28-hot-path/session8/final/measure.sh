#!/bin/bash
# Session 8 final measurements: before = bin-v17 (session 7's final code), after = bin-v18 (merged main, session 8).
OLD=/work/bin-v17
B=/work/bin-v18
R=/work/runs/v18
mkdir -p $R
log() { echo "$1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log; }
trace() { n=$1; bin=$2; sim=$3; shift 3
  log "start $n"
  nice -n -10 $B/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 \
    --policies cache_aware:4 --limit 2000 --sim-bin $sim --router-bin $bin --out $R/$n "$@" \
    > $R/$n.stdout 2> $R/$n.stderr
  log "end $n rc $?"; }
trace 1tok-before-1 $OLD/prefix-router $OLD/sim-worker --max-output-tokens 1
trace 1tok-after-1 $B/prefix-router $B/sim-worker --max-output-tokens 1
trace 1tok-before-2 $OLD/prefix-router $OLD/sim-worker --max-output-tokens 1
trace 1tok-after-2 $B/prefix-router $B/sim-worker --max-output-tokens 1
trace stream-before-1 $OLD/prefix-router $OLD/sim-worker
trace stream-after-1 $B/prefix-router $B/sim-worker
trace 1tok-before-t1 $OLD/prefix-router $OLD/sim-worker --max-output-tokens 1 --router-arg=--async-threads=1
trace 1tok-after-3 $B/prefix-router $B/sim-worker --max-output-tokens 1
trace stream-before-2 $OLD/prefix-router $OLD/sim-worker
trace stream-after-2 $B/prefix-router $B/sim-worker
log done
