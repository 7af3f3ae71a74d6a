#!/bin/bash
B=/work/bin-v17; R=/work/runs/v17
log() { echo "$1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log; }
while ! grep -q '^done' $R/log; do sleep 5; done
log "start faults"
nice -n -10 $B/loadtest run --workload rag --rate 8 --duration 40s --workers 3 --policies cache_aware:4 \
  --scenario worker-kill,rolling-restart --router-bin $B/prefix-router --sim-bin $B/sim-worker --out $R/faults \
  > $R/faults.stdout 2> $R/faults.stderr
log "end faults rc $?"
for round in 1 2 3; do
  for which in before after; do
    bin=/tmp/house6/proxy_bench-before; [ $which = after ] && bin=$B/proxy_bench
    nice -n -10 /usr/bin/time -f "%U user %S sys %e wall" $bin --bench > $R/bench-$which-$round.md 2> $R/bench-$which-$round.err
    log "bench $which-$round rc $?"
  done
done
log done2
