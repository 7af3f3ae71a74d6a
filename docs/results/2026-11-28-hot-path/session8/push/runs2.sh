#!/bin/bash
# session 8, the push API: before (bin-v17 router + sims) vs after (push8's
# router + sims), interleaved, one output token, 2 each; counts over a 20 s
# window of each run (count.sh).
A=/work/wt-push8/target/release
B=/work/bin-v17
OUT=/tmp/push8/runs; mkdir -p $OUT
LOG=$OUT/runs.log
run() { # name bin-dir [probe script]
  name=$1; d=$2; probe=${3:-/tmp/push8/count.sh}
  echo "$(date -u +%T) start $name load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
  nice -n -10 $B/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 --policies cache_aware:4 \
    --limit 2000 --sim-bin $d/sim-worker --router-bin $d/prefix-router --max-output-tokens 1 --out $OUT/$name > $OUT/$name.log 2>&1 &
  lt=$!
  sleep 30
  $probe $lt 20 > $OUT/$name.count.txt 2>&1
  wait $lt
  echo "$(date -u +%T) end $name rc $? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
}
run 1tok-after-3 $A
run 1tok-before-3 $B
run 1tok-after-4 $A
run 1tok-before-4 $B
echo "$(date -u +%T) all done" >> $LOG
