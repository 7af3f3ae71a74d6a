#!/bin/bash
B=/work/bin-v17; R=/work/runs/v17
log() { echo "$1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log; }
while ! grep -q '^done2' $R/log; do sleep 5; done
for i in 1 2 3; do
log "start aa-$i"
nice -n -10 $B/loadtest run --workload rag --rate 8 --duration 40s --workers 3 \
  --policies cache_aware:2,cache_aware:2+same --variant same=--migration-limit=3 --scenario steady \
  --router-bin $B/prefix-router --sim-bin $B/sim-worker --out $R/aa-$i > $R/aa-$i.stdout 2> $R/aa-$i.stderr
log "end aa-$i rc $?"
done
log done3
