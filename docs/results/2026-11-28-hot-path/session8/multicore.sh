#!/bin/bash
# session 8: can one router use both cores? One router, 8 workers, speed-up 48, streamed.
# $1 = after router binary
AFTER=$1
B=/work/bin-v17
OUT=/tmp/tpc8/runs; mkdir -p $OUT
LOG=$OUT/runs.log
run() { # name extra-args...
  name=$1; shift
  echo "$(date -u +%T) start $name load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
  nice -n -10 $B/loadtest run --workload trace --speedup 48 --workers 8 --num-blocks 8192 --policies cache_aware:1 \
    --limit 3000 --sim-bin $B/sim-worker --router-bin $AFTER "$@" --out $OUT/$name > $OUT/$name.log 2>&1
  echo "$(date -u +%T) end $name rc $? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
}
run multicore-after
run multicore-t1 --router-arg=--async-threads=1
echo "$(date -u +%T) multicore done" >> $LOG
