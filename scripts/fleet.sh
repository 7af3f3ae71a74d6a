#!/usr/bin/env bash
# The topology of docker-compose.yml as local processes on 127.0.0.1:
#
#   clients -> HAProxy (TCP, health checks; deploy/haproxy.cfg)
#           -> FLEET_ROUTERS x prefix-router serve -> valkey-server (AOF)
#   FLEET_WORKERS x sim-worker, reporting their caches through the balancer
#
#   scripts/fleet.sh up       start it all; if anything fails to come up,
#                             stop what was started and show the logs
#   scripts/fleet.sh status   each process and its health, the balancer URL;
#                             exits 1 if anything is down, 3 if not up
#   scripts/fleet.sh down     stop what `up` started, and only that
#
# Settings (environment):
#   FLEET_DIR               run directory (default target/fleet): pids/,
#                           logs/, valkey/ (the AOF), haproxy.cfg, ports.env,
#                           balancer.url, token
#   FLEET_ROUTERS=2  FLEET_WORKERS=3
#   FLEET_PORT              balancer port      } default: free ports chosen
#   FLEET_STATS_PORT        HAProxy stats page } at `up`, written to
#   FLEET_VALKEY_PORT       valkey-server      } ports.env (never 6379)
#   FLEET_ROUTER_BASE_PORT  routers on BASE, BASE+1, ...
#   FLEET_WORKER_BASE_PORT  sim-workers on BASE, BASE+1, ...
#   FLEET_MODEL=qwen3  FLEET_TOKENIZER_DIR (default ../shared/tokenizers/qwen3)
#   FLEET_BIN_DIR           where prefix-router and sim-worker are (default
#                           target/release, built when missing)
#   FLEET_ROUTER_ARGS, FLEET_SIM_ARGS   extra flags (word-split), e.g.
#                           FLEET_SIM_ARGS="--time-scale 0.1"
#   FLEET_TIMEOUT=60        seconds `up` waits for each stage
#   PREFIX_ROUTER_INTERNAL_TOKEN  the fleet's token; when unset, one is
#                           generated into FLEET_DIR/token (mode 0600)
#   PREFIX_ROUTER_*         read by the routers as usual (flags above win)
#   VALKEY_SERVER, HAPROXY  the binaries (default: from PATH)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${FLEET_DIR:-$ROOT/target/fleet}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
PIDS=$DIR/pids
LOGS=$DIR/logs

log() { printf 'fleet: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# --- processes --------------------------------------------------------------
# A pid file holds "PID STARTTIME EXE": a process is ours only while all
# three still match, so a recycled pid is never signalled.

# The start time (clock ticks after boot) of a live process: not a zombie,
# or a zombie leader whose other threads are still exiting (and may still
# hold its sockets).
start_time() {
  local pid=$1 stat tasks
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  if [ "$1" = Z ] || [ "$1" = X ]; then
    tasks=$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    [ "$tasks" -gt 1 ] || return 1
  fi
  echo "${20}"
}

# Prints the pid of process NAME if it is still the one `up` started.
ours() {
  local f=$PIDS/$1 pid st exe now cur
  [ -f "$f" ] || return 1
  read -r pid st exe <"$f" || return 1
  now=$(start_time "$pid") || return 1
  [ "$now" = "$st" ] || return 1
  cur=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "${cur% (deleted)}" = "$exe" ] || return 1
  echo "$pid"
}

# launch NAME EXE ARGS...: starts EXE detached, output to logs/NAME.log.
# (Run as named: valkey-server is a symlink whose target acts on argv[0].)
launch() {
  local name=$1 path=$2 exe pid st=""
  exe=$(readlink -f "$path")
  shift 2
  setsid "$path" "$@" </dev/null >"$LOGS/$name.log" 2>&1 &
  pid=$!
  # Until the exec is done, the pid runs bash, then setsid.
  for _ in $(seq 200); do
    st=$(start_time "$pid") || break
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] && break
    st=""
    sleep 0.01
  done
  [ -n "$st" ] || die "$name did not start: $(tail -n 5 "$LOGS/$name.log")"
  echo "$pid $st $exe" >"$PIDS/$name"
}

# The pid files, in start order: valkey, routers, balancer, workers.
names() {
  [ -d "$PIDS" ] || return 0
  local f
  for f in "$PIDS"/*; do
    [ -e "$f" ] && echo "${f##*/}"
  done | awk '{ r = /^valkey$/ ? 0 : /^router-/ ? 1 : /^balancer$/ ? 2 : 3; print r, $0 }' |
    sort -k1,1n -k2,2V | cut -d' ' -f2
}

# stop PATTERN TIMEOUT: SIGTERM to our processes named PATTERN, SIGKILL to
# those still there after TIMEOUT seconds.
stop() {
  local pattern=$1 timeout=$2 n pid left=() deadline
  for n in $(names); do
    # shellcheck disable=SC2053
    [[ $n == $pattern ]] || continue
    if pid=$(ours "$n"); then
      kill -TERM "$pid" 2>/dev/null || true
      left+=("$n")
      log "stopping $n (pid $pid)"
    else
      rm -f "$PIDS/$n"
    fi
  done
  deadline=$((SECONDS + timeout))
  while [ ${#left[@]} -gt 0 ]; do
    local still=()
    for n in "${left[@]}"; do
      if pid=$(ours "$n"); then
        if [ $SECONDS -ge "$deadline" ]; then
          log "$n did not stop in ${timeout}s: SIGKILL"
          kill -KILL "$pid" 2>/dev/null || true
        fi
        still+=("$n")
      else
        rm -f "$PIDS/$n"
      fi
    done
    left=("${still[@]+"${still[@]}"}")
    [ ${#left[@]} -eq 0 ] || sleep 0.1
  done
}

down() {
  # Workers first: they deregister through the balancer as they stop.
  stop 'sim-*' 10
  stop balancer 5
  stop 'router-*' 5
  stop valkey 10
}

# --- probes -----------------------------------------------------------------

http_code() { curl -s -o /dev/null -m "${2:-2}" -w '%{http_code}' "$1" 2>/dev/null || true; }
http_body() { curl -sf -m 2 "${@}" 2>/dev/null || true; }

valkey_ping() {
  local reply=""
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  read -r -t 2 reply <&3 || true
  exec 3<&-
  [ "${reply%$'\r'}" = "+PONG" ]
}

# Router states in HAProxy's stats CSV: "router-0 UP" lines.
backend_states() {
  http_body "http://127.0.0.1:$STATS_PORT/stats;csv" |
    awk -F, '$2 ~ /^router-[0-9]+$/ { print $2, $18 }'
}

# wait_for WHAT CMD...: retries CMD until it succeeds or FLEET_TIMEOUT.
wait_for() {
  local what=$1 deadline=$((SECONDS + ${FLEET_TIMEOUT:-60}))
  shift
  until "$@"; do
    [ $SECONDS -lt "$deadline" ] || die "timed out waiting for $what"
    sleep 0.1
  done
}

# --- up ---------------------------------------------------------------------

free_ports() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
  else
    local out=() p
    while [ ${#out[@]} -lt "$1" ]; do
      p=$((40000 + RANDOM % 20000))
      if ! { exec 3<>"/dev/tcp/127.0.0.1/$p"; } 2>/dev/null && [[ " ${out[*]} " != *" $p "* ]]; then
        out+=("$p")
      else
        exec 3<&- 2>/dev/null || true
      fi
    done
    echo "${out[@]}"
  fi
}

# deploy/haproxy.cfg for loopback: the docker-only block dropped, each
# `bind :PORT` on 127.0.0.1 (the frontend on the balancer port, the stats
# listener on the stats port), one static server per router in place of the
# server-template. The global maxconn is lowered to what this shell's open
# file limit allows (HAProxy needs about two descriptors per connection).
local_haproxy_cfg() {
  local nofile
  nofile=$(ulimit -n)
  [ "$nofile" != unlimited ] || nofile=1048576
  awk -v bal="$BALANCER_PORT" -v stats="$STATS_PORT" -v routers="${R_PORTS[*]}" \
    -v fdmax="$(((nofile - 200) / 2))" '
    /^# --- docker-only begin ---/ { skip = 1; blocks++; next }
    /^# --- docker-only end ---/ { skip = 0; next }
    skip { next }
    /^[^ \t#]/ { section = $1 " " $2 }
    section == "global " && $1 == "maxconn" && $2 > fdmax {
      print "    maxconn " fdmax
      next
    }
    $1 == "bind" {
      if (section ~ /^frontend /) port = bal
      else if (section == "listen stats") port = stats
      else { print "unexpected bind in " section > "/dev/stderr"; exit 1 }
      print "    bind 127.0.0.1:" port
      binds++
      next
    }
    $1 == "server-template" {
      n = split(routers, p, " ")
      for (i = 1; i <= n; i++) printf "    server router-%d 127.0.0.1:%s\n", i - 1, p[i]
      templates++
      next
    }
    { print }
    END {
      if (blocks != 1 || binds != 2 || templates != 1) {
        printf "deploy/haproxy.cfg: expected 1 docker-only block, 2 binds, 1 server-template; got %d, %d, %d\n",
          blocks, binds, templates > "/dev/stderr"
        exit 1
      }
    }' "$ROOT/deploy/haproxy.cfg"
}

refuse_6379() {
  local p
  for p in "$@"; do
    [ "$p" != 6379 ] || die "port 6379 is reserved for a system Valkey; choose another"
  done
}

up() {
  local routers=${FLEET_ROUTERS:-2} workers=${FLEET_WORKERS:-3}
  local model=${FLEET_MODEL:-qwen3}
  local tokdir=${FLEET_TOKENIZER_DIR:-$ROOT/../shared/tokenizers/qwen3}
  local valkey_bin=${VALKEY_SERVER:-valkey-server} haproxy_bin=${HAPROXY:-haproxy}
  local bin=${FLEET_BIN_DIR:-$ROOT/target/release}
  [[ $routers =~ ^[1-9][0-9]*$ ]] || die "FLEET_ROUTERS must be a positive number"
  [[ $workers =~ ^[1-9][0-9]*$ ]] || die "FLEET_WORKERS must be a positive number"

  for n in $(names); do
    if ours "$n" >/dev/null; then die "already up in $DIR ($n runs): scripts/fleet.sh down first"; fi
  done
  valkey_bin=$(command -v "$valkey_bin") || die "valkey-server not found: run scripts/install-deps.sh"
  haproxy_bin=$(command -v "$haproxy_bin" || command -v /usr/sbin/haproxy) ||
    die "haproxy not found: run scripts/install-deps.sh (or apt-get install haproxy)"
  command -v curl >/dev/null || die "curl not found"
  command -v setsid >/dev/null || die "setsid not found (util-linux)"
  [ -f "$tokdir/tokenizer.json" ] || die "no tokenizer.json in $tokdir (set FLEET_TOKENIZER_DIR)"
  tokdir=$(cd "$tokdir" && pwd)
  if [ -z "${FLEET_BIN_DIR:-}" ] && { [ ! -x "$bin/prefix-router" ] || [ ! -x "$bin/sim-worker" ]; }; then
    log "building release binaries"
    (cd "$ROOT" && cargo build --release --locked --bin prefix-router --bin sim-worker)
  fi
  for b in prefix-router sim-worker; do
    [ -x "$bin/$b" ] || die "no $bin/$b"
  done

  rm -rf "$PIDS" "$LOGS" "$DIR/ports.env" "$DIR/balancer.url" "$DIR/haproxy.cfg"
  mkdir -p "$PIDS" "$LOGS" "$DIR/valkey"

  if [ -n "${PREFIX_ROUTER_INTERNAL_TOKEN:-}" ]; then
    rm -f "$DIR/token"
  else
    if [ ! -s "$DIR/token" ]; then
      (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/token")
    fi
    chmod 600 "$DIR/token"
    PREFIX_ROUTER_INTERNAL_TOKEN=$(cat "$DIR/token")
  fi
  export PREFIX_ROUTER_INTERNAL_TOKEN

  # Ports: given ones, the rest free ones picked together.
  local picked
  read -r -a picked <<<"$(free_ports $((3 + routers)))"
  VALKEY_PORT=${FLEET_VALKEY_PORT:-${picked[0]}}
  BALANCER_PORT=${FLEET_PORT:-${picked[1]}}
  STATS_PORT=${FLEET_STATS_PORT:-${picked[2]}}
  R_PORTS=()
  for ((i = 0; i < routers; i++)); do
    if [ -n "${FLEET_ROUTER_BASE_PORT:-}" ]; then
      R_PORTS+=($((FLEET_ROUTER_BASE_PORT + i)))
    else
      R_PORTS+=("${picked[3 + i]}")
    fi
  done
  refuse_6379 "$VALKEY_PORT" "$BALANCER_PORT" "$STATS_PORT" "${R_PORTS[@]}"
  BALANCER_URL=http://127.0.0.1:$BALANCER_PORT

  UP_OK=0
  trap 'up_failed' EXIT

  log "valkey-server on 127.0.0.1:$VALKEY_PORT (AOF in $DIR/valkey)"
  launch valkey "$valkey_bin" --port "$VALKEY_PORT" --bind 127.0.0.1 --dir "$DIR/valkey" \
    --appendonly yes --appendfsync everysec --save '' --daemonize no --logfile ''
  wait_for "valkey" valkey_ready

  local extra_router extra_sim
  read -r -a extra_router <<<"${FLEET_ROUTER_ARGS:-}"
  read -r -a extra_sim <<<"${FLEET_SIM_ARGS:-}"
  for ((i = 0; i < routers; i++)); do
    log "router-$i on 127.0.0.1:${R_PORTS[i]}"
    launch "router-$i" "$bin/prefix-router" serve --listen "127.0.0.1:${R_PORTS[i]}" \
      --valkey "redis://127.0.0.1:$VALKEY_PORT" --model "$model" --tokenizer-dir "$tokdir" \
      "${extra_router[@]+"${extra_router[@]}"}"
  done
  for ((i = 0; i < routers; i++)); do
    wait_for "router-$i /ready" router_ready "${R_PORTS[i]}" "router-$i"
  done

  log "balancer (HAProxy, TCP) on $BALANCER_URL, stats on http://127.0.0.1:$STATS_PORT/stats"
  local_haproxy_cfg >"$DIR/haproxy.cfg" || die "cannot derive the local HAProxy config"
  "$haproxy_bin" -c -q -f "$DIR/haproxy.cfg" || die "HAProxy refuses $DIR/haproxy.cfg"
  launch balancer "$haproxy_bin" -db -f "$DIR/haproxy.cfg"
  wait_for "the balancer" balancer_ready "$routers"

  # The ports so far, for status and down (workers are added below).
  write_ports
  local ports=()
  for ((i = 0; i < workers; i++)); do
    local port=0
    [ -z "${FLEET_WORKER_BASE_PORT:-}" ] || port=$((FLEET_WORKER_BASE_PORT + i))
    launch "sim-$i" "$bin/sim-worker" --port "$port" --worker-id "sim-$i" --model "$model" \
      --tokenizer-dir "$tokdir" --fleet-url "$BALANCER_URL" "${extra_sim[@]+"${extra_sim[@]}"}"
  done
  for ((i = 0; i < workers; i++)); do
    wait_for "sim-$i to listen" sim_listening "sim-$i"
    ports+=("$(sim_port "sim-$i")")
    log "sim-$i on 127.0.0.1:${ports[i]}"
  done
  W_PORTS=("${ports[@]}")
  write_ports
  wait_for "$workers live workers in the fleet" fleet_has_workers "$model" "$workers"

  UP_OK=1
  echo "$BALANCER_URL" >"$DIR/balancer.url"
  log "up: $routers routers, $workers workers of model $model"
  echo "balancer: $BALANCER_URL"
  if [ -f "$DIR/token" ]; then
    echo "token:    $DIR/token   (export PREFIX_ROUTER_INTERNAL_TOKEN=\$(cat $DIR/token))"
  fi
  echo "try:      curl -si $BALANCER_URL/v1/completions -H 'content-type: application/json' -d '{\"model\":\"$model\",\"prompt\":\"Hello\",\"max_tokens\":4}'"
}

up_failed() {
  [ "${UP_OK:-0}" = 1 ] && return
  log "up failed; the last lines of each log:"
  local f
  for f in "$LOGS"/*.log; do
    [ -f "$f" ] || continue
    printf '==> %s <==\n' "$f" >&2
    tail -n 15 "$f" >&2
  done
  down
  exit 1
}

valkey_ready() {
  ours valkey >/dev/null || die "valkey exited: $(tail -n 5 "$LOGS/valkey.log")"
  valkey_ping "$VALKEY_PORT"
}

router_ready() {
  ours "$2" >/dev/null || die "$2 exited: $(tail -n 5 "$LOGS/$2.log")"
  [ "$(http_code "http://127.0.0.1:$1/ready")" = 200 ]
}

balancer_ready() {
  ours balancer >/dev/null || die "balancer exited: $(tail -n 5 "$LOGS/balancer.log")"
  [ "$(http_code "$BALANCER_URL/health")" = 200 ] || return 1
  [ "$(backend_states | grep -c ' UP$')" = "$1" ]
}

sim_listening() {
  ours "$1" >/dev/null || die "$1 exited: $(tail -n 5 "$LOGS/$1.log")"
  grep -q '^listening on http://' "$LOGS/$1.log"
}

sim_port() { grep -m1 '^listening on http://' "$LOGS/$1.log" | sed 's/.*://'; }

fleet_has_workers() {
  local body live
  body=$(http_body -H "Authorization: Bearer $PREFIX_ROUTER_INTERNAL_TOKEN" "$BALANCER_URL/admin/workers?model=$1")
  live=$(grep -o '"status":"live"' <<<"$body" | wc -l)
  [ "$live" -ge "$2" ]
}

write_ports() {
  {
    echo "BALANCER_URL=$BALANCER_URL"
    echo "BALANCER_PORT=$BALANCER_PORT"
    echo "STATS_PORT=$STATS_PORT"
    echo "VALKEY_PORT=$VALKEY_PORT"
    echo "ROUTER_PORTS=\"${R_PORTS[*]}\""
    echo "WORKER_PORTS=\"${W_PORTS[*]+"${W_PORTS[*]}"}\""
  } >"$DIR/ports.env"
}

# --- status -----------------------------------------------------------------

status() {
  if [ ! -f "$DIR/ports.env" ] || [ -z "$(names)" ]; then
    echo "fleet: not up in $DIR"
    return 3
  fi
  # shellcheck disable=SC1091
  . "$DIR/ports.env"
  local -a rports wports
  read -r -a rports <<<"$ROUTER_PORTS"
  read -r -a wports <<<"$WORKER_PORTS"
  local bad=0 n pid addr health states
  states=$(backend_states)
  echo "fleet: $DIR"
  for n in $(names); do
    addr="" health=""
    if ! pid=$(ours "$n"); then
      printf '  %-10s pid %-6s %-22s %s\n' "$n" "-" "-" "NOT RUNNING"
      bad=1
      continue
    fi
    case $n in
    valkey)
      addr=127.0.0.1:$VALKEY_PORT
      if valkey_ping "$VALKEY_PORT"; then health="ok (PING), AOF in $DIR/valkey"; else health="NO PONG"; bad=1; fi
      ;;
    router-*)
      local i=${n#router-} h r s
      addr=127.0.0.1:${rports[i]}
      h=$(http_code "http://$addr/health")
      r=$(http_code "http://$addr/ready")
      s=$(awk -v n="$n" '$1 == n { print $2 }' <<<"$states")
      health="/health $h, /ready $r, balancer sees ${s:-?}"
      [ "$h" = 200 ] && [ "$r" = 200 ] && [ "$s" = UP ] || bad=1
      ;;
    balancer)
      local h
      addr=127.0.0.1:$BALANCER_PORT
      h=$(http_code "$BALANCER_URL/health")
      health="/health through it $h, $(grep -c ' UP$' <<<"$states" || true) routers UP, stats http://127.0.0.1:$STATS_PORT/stats"
      [ "$h" = 200 ] || bad=1
      ;;
    sim-*)
      local i=${n#sim-} h reg
      addr=127.0.0.1:${wports[i]:-?}
      h=$(http_code "http://$addr/health")
      if http_body "http://$addr/sim/state" | grep -q '"registered":true'; then reg=yes; else reg=NO; fi
      health="/health $h, registered in the fleet: $reg"
      [ "$h" = 200 ] && [ "$reg" = yes ] || bad=1
      ;;
    esac
    printf '  %-10s pid %-6s %-22s %s\n' "$n" "$pid" "$addr" "$health"
  done
  echo "balancer: $BALANCER_URL"
  return $bad
}

case ${1:-} in
up) up ;;
down)
  down
  log "down ($DIR kept: logs, AOF)"
  ;;
status) status ;;
*)
  echo "usage: $0 up|down|status   (settings: see the top of this script)" >&2
  exit 2
  ;;
esac
