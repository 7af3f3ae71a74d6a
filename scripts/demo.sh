#!/usr/bin/env bash
# One-command demo: installs valkey-server and haproxy if missing, builds in
# release, then has the load test start Valkey, 2 routers behind HAProxy and
# 3 simulated vLLM workers on loopback, replay a RAG workload with the
# `cache_aware` policy and then with `round_robin` (a fresh fleet each), and
# print the comparison. Stops everything it starts. Extra arguments go to
# `loadtest run` (e.g. --duration 20s).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
echo "demo: building (release; the first build takes a few minutes)"
cargo build --release --locked --workspace --bins --quiet

out=target/demo
echo "demo: 2 routers + 3 sim-workers; RAG over 30 documents (~45k tokens) that"
echo "demo: fit the 3 workers' KV caches together (3 × 20k tokens) but not one"
./target/release/loadtest run \
  --policies cache_aware,round_robin --routers 2 --workers 3 \
  --num-blocks 1280 --time-scale 1 \
  --workload rag --documents 30 --doc-words 1400 --zipf 0.6 --question-words 30 \
  --rate 6 --duration 40s --output-tokens 16 --api chat \
  --out "$out" "$@"
echo
echo "demo: cache_aware sends each document to the worker that holds it, so the"
echo "demo: fleet caches every document once: higher hit rate, lower TTFT than"
echo "demo: round_robin, whose workers each try to cache them all and evict."
echo "demo: full report with plots: $out/report.md"
