#!/bin/bash
# session 8: thread per core, before/after interleaved. $1 = after router binary (release of branch tpc8)
AFTER=$1
B=/work/bin-v17
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=/tmp/tpc8/runs; mkdir -p $OUT
LOG=$OUT/runs.log
run() { # name router-bin extra-args...
  name=$1; rb=$2; shift 2
  echo "$(date -u +%T) start $name load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
  nice -n -10 $B/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 --policies cache_aware:4 \
    --limit 2000 --sim-bin $B/sim-worker --router-bin $rb "$@" --out $OUT/$name > $OUT/$name.log 2>&1 &
  lt=$!
  sleep 30
  $HERE/ctx.sh $lt 20 > $OUT/$name.ctx 2>&1
  wait $lt
  echo "$(date -u +%T) end $name rc $? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
}
T1=--router-arg=--async-threads=1
I0=--router-arg=--tokenize-inline-bytes=0
for i in 1 2; do
  run 1tok-before-$i $B/prefix-router --max-output-tokens 1
  run 1tok-after-$i $AFTER --max-output-tokens 1
  run 1tok-t1-$i $B/prefix-router --max-output-tokens 1 $T1
  run 1tok-after-inline0-$i $AFTER --max-output-tokens 1 $I0
done
run stream-before $B/prefix-router
run stream-after $AFTER
run stream-t1 $B/prefix-router $T1
echo "$(date -u +%T) all done" >> $LOG
