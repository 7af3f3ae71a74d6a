#!/bin/bash
# session 7 before/after: interleaved. $1 = after router binary
AFTER=$1
B=/work/bin-v16
OUT=/tmp/cpu7/runs; mkdir -p $OUT
LOG=$OUT/runs.log
run() { # name router-bin extra-args...
  name=$1; rb=$2; shift 2
  echo "$(date -u +%T) start $name load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
  nice -n -10 $B/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 --policies cache_aware:4 \
    --limit 2000 --sim-bin $B/sim-worker --router-bin $rb "$@" --out $OUT/$name > $OUT/$name.log 2>&1 &
  lt=$!
  sleep 30
  /tmp/cpu7/ctx.sh $lt 20 > $OUT/$name.ctx 2>&1
  wait $lt
  echo "$(date -u +%T) end $name rc $? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
}
run 1tok-before-1 $B/prefix-router --max-output-tokens 1
run 1tok-after-1 $AFTER --max-output-tokens 1
run 1tok-before-2 $B/prefix-router --max-output-tokens 1
run 1tok-after-2 $AFTER --max-output-tokens 1
run stream-before $B/prefix-router
run stream-after $AFTER
run 1tok-before-async1 $B/prefix-router --max-output-tokens 1 --router-arg=--async-threads=1
echo "$(date -u +%T) all done" >> $LOG
