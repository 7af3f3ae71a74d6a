#!/usr/bin/env bash
# RSS of a router after ten oversized prompts (issue 30, defect 5): idle,
# peak (VmHWM) and 5 s after the last one, for each router binary given,
# side by side in one run. The prompts are 2,000,000 characters each,
# alternately words ("hello hello ...", 333,334 tokens: routed, to a worker
# that is not there) and digits (2,000,000 tokens: a 413 once the count
# passes the limit), under an explicit --max-prompt-tokens 1000000.
#
#   scripts/bench-oversized-rss.sh                      # target/release/prefix-router (built)
#   scripts/bench-oversized-rss.sh OLD_BIN NEW_BIN ...  # binaries to compare
#
# Needs valkey-server, curl, python3 and ../shared/tokenizers/qwen3.
set -euo pipefail
cd "$(dirname "$0")/.."

bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  cargo build --release --bin prefix-router
  bins=(target/release/prefix-router)
fi
tokenizer=../shared/tokenizers/qwen3
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
mib() { awk -v k="$2" '$1 == k":" { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
for name, text in [("words", "hello " * (2_000_000 // 6)), ("digits", "0123456789" * 200_000)]:
    with open(f"{d}/{name}.json", "w") as f:
        json.dump({"model": "qwen3", "prompt": text, "max_tokens": 1}, f)
PY

vport=$(free_port)
valkey-server --bind 127.0.0.1 --port "$vport" --save "" --appendonly no >"$work/valkey.log" 2>&1 &
pids+=($!)

echo "date: $(date -u +%Y-%m-%dT%H:%MZ); machine: $(nproc) cores, $(uname -sr)"
printf '%-40s %9s %9s %9s %7s  %s\n' binary "idle MiB" "peak MiB" "after MiB" ratio "statuses (ms)"
for bin in "${bins[@]}"; do
  port=$(free_port)
  "$bin" serve --listen "127.0.0.1:$port" --valkey "redis://127.0.0.1:$vport" \
    --key-prefix "bench$port" --model qwen3 --tokenizer-dir "$tokenizer" \
    --worker w0=http://127.0.0.1:9 --allow-unauthenticated-internal \
    --max-prompt-tokens 1000000 >"$work/router-$port.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 200); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.1
  done
  sleep 3
  idle=$(mib "$pid" VmRSS)
  statuses=""
  for i in $(seq 1 10); do
    body=$([ $((i % 2)) -eq 1 ] && echo words || echo digits)
    out=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -H 'content-type: application/json' \
      --data-binary "@$work/$body.json" "http://127.0.0.1:$port/v1/completions")
    statuses+="$(awk '{ printf "%s(%.0f) ", $1, $2 * 1000 }' <<<"$out")"
  done
  sleep 5
  after=$(mib "$pid" VmRSS)
  peak=$(mib "$pid" VmHWM)
  ratio=$(awk -v a="$after" -v i="$idle" 'BEGIN { printf "%.2f", a / i }')
  printf '%-40s %9s %9s %9s %7s  %s\n' "$bin" "$idle" "$peak" "$after" "$ratio" "$statuses"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
