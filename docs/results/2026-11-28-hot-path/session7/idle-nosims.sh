#!/bin/bash
# idle fleet: valkey + 4 routers + 8 sims (2 per router); perf stat of each router for 20 s
# $1 = router binary, $2 = tag
RB=$1; TAG=$2
B=/work/bin-v16
D=/tmp/cpu7/idle-$TAG; mkdir -p $D; cd $D
export PREFIX_ROUTER_INTERNAL_TOKEN=idle-test-token
TOK=/work/shared/tokenizers/qwen3
VP=$((20000 + RANDOM % 10000))
PIDS=()
valkey-server --port $VP --bind 127.0.0.1 --save '' --appendonly no > valkey.log 2>&1 &
PIDS+=($!)
sleep 0.5
RP=(); RPIDS=()
for i in 0 1 2 3; do
  p=$((VP + 100 + i)); RP+=($p)
  $RB serve --listen 127.0.0.1:$p --valkey redis://127.0.0.1:$VP --model qwen3 --tokenizer-dir $TOK --policy cache_aware --router-id router-$i --key-prefix lt > router-$i.log 2>&1 &
  PIDS+=($!); RPIDS+=($!)
done
sleep 5
for i in $(seq 0 $((${SIMS:-8} - 1))); do
  r=${RP[$((i % 4))]}
  $B/sim-worker --port 0 --model qwen3 --tokenizer-dir $TOK --worker-id sim-$i --num-blocks 8192 --max-num-seqs 256 --time-scale 0.125 --seed $i --fleet-url http://127.0.0.1:$r > sim-$i.log 2>&1 &
  PIDS+=($!)
done
sleep 8
for pid in "${RPIDS[@]}"; do
  perf stat -x, -e task-clock,context-switches -p $pid -- sleep 20 2> perf-$pid.txt &
done
wait_pids=$(jobs -p | tail -4)
sleep 21
sleep 1
for pid in "${RPIDS[@]}"; do
  tc=$(grep task-clock perf-$pid.txt | cut -d, -f1); cs=$(grep context-switches perf-$pid.txt | cut -d, -f1)
  echo "$TAG router $pid: $(echo "$tc / 20" | bc -l | xargs printf %.2f) ms CPU/s, $(echo "$cs / 20" | bc -l | xargs printf %.1f) switches/s"
done
for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done
sleep 1
