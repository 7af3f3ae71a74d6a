#!/bin/bash
# Measurement for issue 29, step "no-fault cost" and the twin check (branch
# migrate, after the relay's cheaper reading). Run from /work/wt-migrate
# after: cargo build --release --locked -p prefix-router -p sim-worker -p loadtest
set -x
# Done on 2026-11-28: the first run and steady-2, steady-3; the rolling
# restart was not run (no time left).
cd /work/wt-migrate
L=target/release/loadtest
O=target/mig-runs4
date -u
$L run --workload rag --rate 8 --duration 40s --workers 3 \
  --policies cache_aware:2,cache_aware:2+nomig --variant nomig=--migration-limit=0 \
  --scenario steady,worker-kill --out $O/steady-1-and-worker-kill
date -u
for i in 2 3; do
  $L run --workload rag --rate 8 --duration 40s --workers 3 \
    --policies cache_aware:2,cache_aware:2+nomig --variant nomig=--migration-limit=0 \
    --scenario steady --out $O/steady-$i
  date -u
done
$L run --workload rag --rate 8 --duration 40s --workers 3 \
  --policies cache_aware:4,cache_aware:4+nomig --variant nomig=--migration-limit=0 \
  --scenario rolling-restart --out $O/rolling-restart
date -u
