#!/bin/bash
# session 8, the carried heartbeat: the first cut's binaries (cut1, f05492d)
# vs the branch with the heartbeat carried by the flush (hb), one token,
# interleaved; counts over a 20 s window (count.sh).
A=/work/wt-push8/target/release
C=/tmp/push8/bin-cut1
B=/work/bin-v17
OUT=/tmp/push8/runs; mkdir -p $OUT
LOG=$OUT/runs.log
run() { # name bin-dir
  name=$1; d=$2
  echo "$(date -u +%T) start $name load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
  nice -n -10 $B/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 --policies cache_aware:4 \
    --limit 2000 --sim-bin $d/sim-worker --router-bin $d/prefix-router --max-output-tokens 1 --out $OUT/$name > $OUT/$name.log 2>&1 &
  lt=$!
  sleep 30
  /tmp/push8/count.sh $lt 20 > $OUT/$name.count.txt 2>&1
  wait $lt
  echo "$(date -u +%T) end $name rc $? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
}
run 1tok-hb-1 $A
run 1tok-cut1-1 $C
echo "$(date -u +%T) all done" >> $LOG
