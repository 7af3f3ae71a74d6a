#!/bin/bash
# one router, /health hammered by curl --parallel (64 at once, keep-alive), 10 s: router CPU %
# $1 = label, rest = router flags
label=$1; shift
/tmp/tpc8/bin/prefix-router serve --listen 127.0.0.1:18555 --valkey redis://127.0.0.1:16399 --allow-unauthenticated-internal "$@" > /tmp/tpc8/mc-$label.log 2>&1 &
pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18555/health && break; sleep 0.1; done
t0=$(awk '{print $14+$15}' /proc/$pid/stat); s0=$(date +%s.%N)
timeout 10 nice -n 5 curl -s --parallel --parallel-max 64 -o /dev/null -o /dev/null "http://127.0.0.1:18555/health?[1-2000000]" 
t1=$(awk '{print $14+$15}' /proc/$pid/stat); s1=$(date +%s.%N)
echo "$label router CPU $(echo "$t0 $t1 $s0 $s1" | awk '{printf "%.0f%%", ($2-$1)/100/($4-$3)*100}') over $(echo "$s0 $s1" | awk '{printf "%.1f", $2-$1}') s; load $(cut -d' ' -f1-3 /proc/loadavg)"
grep -c . /proc/$pid/task/*/comm >/dev/null
for t in /proc/$pid/task/*; do echo "  $(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done
kill -TERM $pid; wait $pid; echo "  exit $?"
