#!/usr/bin/env bash
# Time to the 413 of a 10.5 MB completions prompt of "hello " (issue 30):
# two release routers side by side on one valkey-server, one with the
# default limit (the model's context, from the Qwen3 files of ../shared)
# and one with --max-prompt-tokens 1000000 (the default before), the
# prompt sent to each in turn RUNS times; prints each time and the medians.
# Everything binds 127.0.0.1 and is stopped at the end.
#
# Usage: scripts/prompt-limit-bench.sh [RUNS]   (default 7)
# Env:   BIN_DIR  where prefix-router is (default: <target>/release)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/release}"
runs="${1:-7}"
tok="$repo/../shared/tokenizers/qwen3"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

vport="$(free_port)"
valkey-server --bind 127.0.0.1 --port "$vport" --save '' --appendonly no --dir "$work" >"$work/valkey.log" 2>&1 &
pids+=($!)
declare -A port
for arm in context old; do
  port[$arm]="$(free_port)"
  extra=()
  [ "$arm" = old ] && extra=(--max-prompt-tokens 1000000)
  "$bin/prefix-router" serve --listen "127.0.0.1:${port[$arm]}" \
    --valkey "redis://127.0.0.1:$vport" --internal-token bench \
    --model m --tokenizer-dir "$tok" "${extra[@]}" >"$work/$arm.log" 2>&1 &
  pids+=($!)
done
for arm in context old; do
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:${port[$arm]}/health" >/dev/null && break
    sleep 0.1
  done
done
python3 -c 'import json,sys; json.dump({"model": "m", "prompt": "hello " * 1750000, "max_tokens": 1}, open(sys.argv[1], "w"))' "$work/body.json"
echo "body: $(stat -c %s "$work/body.json") bytes"
declare -A times
for i in $(seq "$runs"); do
  for arm in context old; do
    out="$(curl -s -o "$work/answer" -w '%{http_code} %{time_total}' \
      -H 'content-type: application/json' --data-binary @"$work/body.json" \
      "http://127.0.0.1:${port[$arm]}/v1/completions")"
    echo "run $i $arm: $out $(head -c 120 "$work/answer")"
    times[$arm]+="${out#* } "
  done
done
for arm in context old; do
  echo "$arm median: $(echo "${times[$arm]}" | tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') s"
done
