#!/bin/bash
# Issue 29 measurements, session 5 (branch relay). Run from /work/wt-relay after
#   cargo build --release --locked -p prefix-router -p sim-worker -p loadtest
# steady-1 with a flat perf profile of one router per arm (perf record -F 499
# -p <pid>, 15 s, both arms alike), worker-kill + rolling-restart with 4
# routers (migration on), then steady-2 and steady-3 unprofiled.
cd /work/wt-relay
L=target/release/loadtest
R=/work/wt-relay/target/release/prefix-router
O=/tmp/relay-runs
mkdir -p $O
steady() {
  nice -n -10 $L run --workload rag --rate 8 --duration 40s --workers 3 \
    --policies cache_aware:2,cache_aware:2+nomig --variant nomig=--migration-limit=0 \
    --scenario steady --out $O/steady-$1 > $O/steady-$1.log 2>&1
}
mine() { for p in $(pgrep -x prefix-router); do [ "$(readlink /proc/$p/exe)" = "$R" ] && echo $p; done | sort -n | head -1; }
date -u; uptime
steady 1 &
run=$!
seen=""
for arm in on off; do
  pid=""
  while [ -z "$pid" ] && kill -0 $run 2>/dev/null; do
    p=$(mine); [ -n "$p" ] && [ "$p" != "$seen" ] && pid=$p; sleep 1
  done
  [ -z "$pid" ] && break
  seen=$pid
  echo "$arm: router $pid $(date -u +%T)"
  sleep 12
  perf record -F 499 -p $pid -o $O/perf-$arm.data -- sleep 15 2> $O/perf-$arm.log
  while kill -0 $pid 2>/dev/null; do sleep 1; done
done
wait $run
date -u; uptime
nice -n -10 $L run --workload rag --rate 8 --duration 40s --workers 3 \
  --policies cache_aware:4 --scenario worker-kill,rolling-restart \
  --out $O/faults-4-routers > $O/faults.log 2>&1
date -u; uptime
steady 2; date -u; uptime
steady 3; date -u; uptime
