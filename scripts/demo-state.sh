#!/usr/bin/env bash
# Demo of the shared state: starts a private valkey-server and two routers on
# ephemeral loopback ports, has a "worker" report through one router and reads
# the state through the other, then stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh >/dev/null
# Only the router: in the workspace, a bare `cargo build` builds every crate.
cargo build --release --quiet --bin prefix-router

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
VK=$(port); R1=$(port); R2=$(port)
TOKEN=demo-token
valkey-server --port "$VK" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/valkey.log" 2>&1 &
pids+=($!)
for r in "$R1" "$R2"; do
  PREFIX_ROUTER_INTERNAL_TOKEN=$TOKEN ./target/release/prefix-router serve \
    --listen "127.0.0.1:$r" --valkey "valkey://127.0.0.1:$VK" --model demo >"$work/router-$r.log" 2>&1 &
  pids+=($!)
done
for r in "$R1" "$R2"; do
  until curl -sf "http://127.0.0.1:$r/ready" >/dev/null; do sleep 0.1; done
done

call() { curl -sS -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' "$@"; echo; }
echo "== worker gpu-0 registers through router 1"
call -X POST "http://127.0.0.1:$R1/internal/heartbeat" \
  -d '{"worker_id":"gpu-0","url":"http://127.0.0.1:9000","model":"demo","load":{"num_requests_waiting":0,"num_requests_running":3,"kv_cache_usage_perc":0.42}}'
echo "== it reports 4 cached blocks, then evicts one"
call -X POST "http://127.0.0.1:$R1/internal/stored" -d '{"worker_id":"gpu-0","block_hashes":[1,2,3,"00000000000000ff"]}'
call -X POST "http://127.0.0.1:$R1/internal/eviction" -d '{"worker_id":"gpu-0","evicted_hashes":[3]}'
echo "== router 2 sees the same fleet"
call "http://127.0.0.1:$R2/admin/workers"
echo "== a full snapshot (destructive sync) through router 2"
call -X POST "http://127.0.0.1:$R2/internal/sync" -d '{"worker_id":"gpu-0","active_hashes":[1,2,5]}'
echo "== the raw state, as valkey-cli shows it"
valkey-cli -p "$VK" HGETALL 'pr:{demo}:f:0000'
valkey-cli -p "$VK" SMEMBERS 'pr:{demo}:r:1'
echo "== bad input is refused with a JSON error"
call -X POST "http://127.0.0.1:$R2/internal/stored" -d '{"worker_id":"gpu-0","block_hashes":["nothex"]}'
