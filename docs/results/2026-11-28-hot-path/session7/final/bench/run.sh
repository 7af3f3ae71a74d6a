#!/bin/bash
B=/work/bin-v17; R=/work/runs/v17
log() { echo "$1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log; }
while ! grep -q '^done3' $R/log; do sleep 5; done
for round in 1 2 3 4; do
  for which in before after-off after-on; do
    bin=$B/proxy_bench; lim=3
    [ $which = before ] && bin=/tmp/house6/proxy_bench-before
    [ $which = after-off ] && lim=0
    (cd /work/main/crates/router && PREFIX_ROUTER_MIGRATION_LIMIT=$lim nice -n -10 /usr/bin/time -f "%U user %S sys %e wall" $bin --bench > $R/bench-$which-$round.md 2> $R/bench-$which-$round.err)
    log "bench $which-$round rc $?"
  done
done
log done4
