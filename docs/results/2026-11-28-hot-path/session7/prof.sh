#!/bin/bash
# $1 = router bin, $2 = tag: perf record the 4 routers for 20 s in a one-token run
B=/work/bin-v16; O=/tmp/cpu7/prof-$2; mkdir -p $O
nice -n -10 $B/loadtest run --workload trace --speedup 8 --workers 8 --num-blocks 8192 --policies cache_aware:4 \
  --limit 2000 --sim-bin $B/sim-worker --router-bin $1 --max-output-tokens 1 --out $O/run > $O/run.log 2>&1 &
lt=$!
sleep 30
pids=$(for p in $(pgrep -f "prefix-router serve"); do a=$p; while [ "$a" -gt 1 ]; do [ "$a" = "$lt" ] && echo $p && break; a=$(awk '{print $4}' /proc/$a/stat); done; done | paste -sd,)
perf record -F 999 -g -p $pids -o $O/perf.data -- sleep 20 > $O/perf.log 2>&1
wait $lt
