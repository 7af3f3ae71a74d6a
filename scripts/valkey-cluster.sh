#!/usr/bin/env bash
# A real Valkey Cluster on loopback: N primaries with R replicas each
# (default 3 + 3), every node a `valkey-server --cluster-enabled yes` on
# 127.0.0.1, joined by `valkey-cli --cluster create`. For trying the fleet
# on a cluster and for the tests that need one (crates/fleet starts it
# through this script). See docs/operations.md, "A Valkey Cluster".
#
#   scripts/valkey-cluster.sh start  [--dir DIR] [--base-port P] [--primaries N] [--replicas R]
#   scripts/valkey-cluster.sh status [--dir DIR]
#   scripts/valkey-cluster.sh stop   [--dir DIR]
#
# Node i listens on P+i (client) and P+100+i (cluster bus); its files
# (nodes.conf, log, pid) are in DIR/node-<P+i>. `start` prints the seed
# URLs for `prefix-router serve --valkey` on its last line. Binaries come
# from $VALKEY_SERVER and $VALKEY_CLI, else valkey-server and valkey-cli
# (redis-server and redis-cli 7 work too).
set -euo pipefail

cmd="${1:-}"
shift || true
dir="target/valkey-cluster"
base=7000
primaries=3
replicas=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --base-port) base="$2"; shift 2 ;;
    --primaries) primaries="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    *) echo "valkey-cluster: unknown argument $1" >&2; exit 2 ;;
  esac
done
server="${VALKEY_SERVER:-valkey-server}"
cli="${VALKEY_CLI:-valkey-cli}"
nodes=$((primaries * (replicas + 1)))

ports() {
  if [ -f "$dir/ports" ]; then cat "$dir/ports"; fi
}

node_up() {
  "$cli" -h 127.0.0.1 -p "$1" PING 2>/dev/null | grep -q PONG
}

case "$cmd" in
  start)
    if [ "$primaries" -lt 3 ]; then
      echo "valkey-cluster: a cluster needs at least 3 primaries" >&2
      exit 2
    fi
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    : >"$dir/ports"
    seeds=()
    for i in $(seq 0 $((nodes - 1))); do
      port=$((base + i))
      node="$dir/node-$port"
      mkdir -p "$node"
      rm -f "$node/nodes.conf" "$node/dump.rdb" "$node/appendonly.aof"
      "$server" --port "$port" --cluster-port $((base + 100 + i)) --bind 127.0.0.1 \
        --cluster-enabled yes --cluster-config-file "$node/nodes.conf" \
        --cluster-node-timeout 2000 --repl-diskless-sync-delay 0 \
        --save "" --appendonly no --dir "$node" \
        --daemonize yes --pidfile "$node/valkey.pid" --logfile "$node/valkey.log"
      echo "$port" >>"$dir/ports"
      seeds+=("127.0.0.1:$port")
    done
    for port in $(ports); do
      for _ in $(seq 1 100); do
        node_up "$port" && break
        sleep 0.05
      done
      node_up "$port" || { echo "valkey-cluster: node $port did not start" >&2; exit 1; }
    done
    "$cli" --cluster create "${seeds[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1 ||
      { cat "$dir/create.log" >&2; exit 1; }
    # Ready when every node sees the whole slot space covered.
    for port in $(ports); do
      for _ in $(seq 1 200); do
        "$cli" -p "$port" CLUSTER INFO 2>/dev/null | grep -q "cluster_state:ok" && break
        sleep 0.05
      done
      "$cli" -p "$port" CLUSTER INFO | grep -q "cluster_state:ok" ||
        { echo "valkey-cluster: node $port never saw cluster_state:ok" >&2; exit 1; }
    done
    # And when every replica has its primary's data (a replica that never
    # synced cannot take over).
    for port in $(ports); do
      "$cli" -p "$port" ROLE | head -n 1 | grep -q slave || continue
      for _ in $(seq 1 200); do
        "$cli" -p "$port" INFO replication | grep -q "master_link_status:up" && break
        sleep 0.05
      done
      "$cli" -p "$port" INFO replication | grep -q "master_link_status:up" ||
        { echo "valkey-cluster: replica $port never synced" >&2; exit 1; }
    done
    urls=$(for port in $(ports); do printf 'redis://127.0.0.1:%s,' "$port"; done)
    echo "valkey-cluster: $primaries primaries, $replicas replica(s) each, in $dir"
    echo "${urls%,}"
    ;;
  status)
    for port in $(ports); do
      if node_up "$port"; then
        role=$("$cli" -p "$port" ROLE | head -n 1)
        state=$("$cli" -p "$port" CLUSTER INFO | grep cluster_state | tr -d '\r')
        echo "127.0.0.1:$port $role $state"
      else
        echo "127.0.0.1:$port down"
      fi
    done
    ;;
  stop)
    for port in $(ports); do
      "$cli" -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    done
    ;;
  *)
    echo "usage: $0 start|status|stop [--dir DIR] [--base-port P] [--primaries N] [--replicas R]" >&2
    exit 2
    ;;
esac
