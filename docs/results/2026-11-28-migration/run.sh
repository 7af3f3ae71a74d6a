#!/bin/bash
# Measurement for issue 29 (branch drain). Run from /work/wt-drain.
set -x
cd /work/wt-drain
L=target/release/loadtest
date -u
$L run --workload rag --rate 8 --duration 40s --workers 3 \
  --policies cache_aware:2,cache_aware:2+nomig --variant nomig=--migration-limit=0 \
  --scenario steady,worker-kill --out target/mig-runs/two-routers
date -u
$L run --workload rag --rate 8 --duration 40s --workers 3 \
  --policies cache_aware:4,cache_aware:4+nomig --variant nomig=--migration-limit=0 \
  --scenario rolling-restart --out target/mig-runs/four-routers
date -u
