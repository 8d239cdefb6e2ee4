#!/usr/bin/env bash
# Sessions in Redis (issue 22), all figures in one run (benches/README.md, section
# "Sessions in Redis"):
#
#  1. per server CPU-second, a session-era `tools/call` echo over Streamable HTTP with
#     [cluster] sessions = "redis" against sessions = "local", same build, same config
#     otherwise (config/default.toml + [redis] url of a redis-server started here):
#       local    one node, sessions = "local"
#       redis-a  one node, sessions = "redis": every request on the node that began the session
#       redis-ab two nodes: each session begun on A, its requests alternately on A and B
#       local-ab its control: two sessions = "local" nodes, each connection with a session on
#                each (`split` dialect), its requests alternately on them: the same
#                connections, processes and alternation as redis-ab, nothing shared
#     ROUNDS rounds (default 5), the three targets in a rotated order each round, each its own
#     generator run, with Redis's `INFO commandstats` read before and after it (commands the
#     nodes sent per answered request). Every node on core 0 (one worker), the generator and
#     redis-server on core 1.
#  2. the first request of a session on a node that did not begin it
#     (benches/redis_sessions_first.py): latency and CPU against the next one, Redis commands.
#  3. three nodes (core 0) behind nginx with config/nginx-three-nodes.conf as it is (its
#     addresses replaced, as tests/it/three_nodes.rs does; nginx and the generator on core 1):
#     sessions/s (initialize + notifications/initialized + DELETE, `churn` dialect) and
#     requests/s, then SIGKILL of one node under SESSIONS sessions each sending a request
#     every 50 ms (benches/redis_sessions_failover.py).
#
#   benches/redis-sessions.sh [generator args...]     e.g. --connections 16 --payload 64 --duration 5
#   ROUNDS=5 OUT=dir PORT_BASE=18900 SESSIONS=30 PARTS="1 2 3"
#   CONFIG=file.toml SERVER_LOG=warn                  (another base config / RUST_LOG)
#   SERVER=/path/to/mcp-ws LOAD=/path/to/load         (given builds: nothing is built here)
# Needs redis-server, redis-cli, nginx, python3. Prints tables; $OUT/summary.md keeps them.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-config/default.toml}
[ -z "${SERVER_LOG:-}" ] || export RUST_LOG=$SERVER_LOG
[ -n "${SERVER_LOG:-}" ] || unset RUST_LOG
echo "== mcp-ws configuration: $CONFIG + [redis] url, log filter: ${SERVER_LOG:-logging.filter of the config}" >&2
SERVER=${SERVER:-}
if [ -z "$SERVER" ]; then
  cargo build --release --quiet
  SERVER=${CARGO_TARGET_DIR:-target}/release/mcp-ws
fi
LOAD=${LOAD:-$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)}
ROUNDS=${ROUNDS:-5}
PARTS=${PARTS:-1 2 3}
SESSIONS=${SESSIONS:-30}
PORT=${PORT_BASE:-18900}
REDIS_PORT=$((PORT + 9))
OUT=${OUT:-bench-results/redis-sessions-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

for port in $(seq "$PORT" $((PORT + 9))); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is taken; set PORT_BASE" >&2; exit 1
  fi
done

taskset -c 1 redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$OUT" --logfile "$OUT/redis.log" & REDIS=$!; pids+=($REDIS)
until redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; do sleep 0.1; done

# The config with Redis: CONFIG with its [redis] url set, and [cluster] sessions (given
# explicitly for both, though "redis" is the default with a url).
config_with() { # sessions extra-server-line > file
  sed -e "s|^url = \"\"|url = \"redis://127.0.0.1:$REDIS_PORT\"|" \
      -e "s|^\[cluster\]|[cluster]\nsessions = \"$1\"|" \
      -e "s|^trusted_proxies = \[\]|trusted_proxies = [$2]|" "$CONFIG"
}
config_with local "" > "$OUT/local.toml"
config_with redis "" > "$OUT/redis.toml"
config_with redis '"127.0.0.1"' > "$OUT/node.toml"
grep -q "^url = \"redis://" "$OUT/redis.toml" && grep -q '^sessions = "redis"' "$OUT/redis.toml" \
  || { echo "could not set [redis] url / [cluster] sessions in $CONFIG" >&2; exit 1; }

NODE=
start_node() { # name port config cpu; sets NODE to its pid
  taskset -c "$4" "$SERVER" --listen "127.0.0.1:$2" --config "$3" >/dev/null 2>"$OUT/$1.log" &
  NODE=$!; pids+=($NODE)
  until (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; do
    kill -0 "$NODE" 2>/dev/null || { echo "node $1 died; see $OUT/$1.log" >&2; exit 1; }
    sleep 0.1
  done
}
stats() { redis-cli -p "$REDIS_PORT" info commandstats > "$1"; }
# Commands the nodes sent between two `INFO commandstats` (redis-cli's INFO left out).
redis_delta() {
  python3 - "$1" "$2" <<'EOF'
import sys
def read(path):
    calls = {}
    for line in open(path):
        if line.startswith("cmdstat_"):
            name, rest = line[8:].strip().split(":", 1)
            calls[name] = int(dict(kv.split("=") for kv in rest.split(","))["calls"])
    return calls
a, b = read(sys.argv[1]), read(sys.argv[2])
print(" ".join(f"{k}={b[k] - a.get(k, 0)}" for k in sorted(b) if k != "info" and b[k] != a.get(k, 0)) or "none")
EOF
}

if [[ " $PARTS " == *" 1 "* || " $PARTS " == *" 2 "* ]]; then
  start_node local $PORT "$OUT/local.toml" 0; LOCAL=$NODE
  start_node redis-a $((PORT + 1)) "$OUT/redis.toml" 0; A=$NODE
  start_node redis-b $((PORT + 2)) "$OUT/redis.toml" 0; B=$NODE
  start_node local-2 $((PORT + 7)) "$OUT/local.toml" 0; LOCAL2=$NODE
  sleep 1
  stats "$OUT/idle-0"; sleep 5; stats "$OUT/idle-1"
  echo "== Redis commands of the idle nodes in 5 s: $(redis_delta "$OUT/idle-0" "$OUT/idle-1")"
fi

if [[ " $PARTS " == *" 1 "* ]]; then
  URL=http://127.0.0.1
  targets=(
    "local,session,$URL:$PORT/mcp,$LOCAL"
    "redis-a,session,$URL:$((PORT + 1))/mcp,$A"
    "local-ab,split,$URL:$PORT/mcp+$URL:$((PORT + 7))/mcp,$LOCAL+$LOCAL2"
    "redis-ab,session,$URL:$((PORT + 1))/mcp+$URL:$((PORT + 2))/mcp,$A+$B"
  )
  for round in $(seq 1 "$ROUNDS"); do
    echo "== round $round/$ROUNDS"
    for i in 0 1 2 3; do
      t=${targets[$(((i + round - 1) % 4))]}
      label=${t%%,*}
      stats "$OUT/r$round-$label-before"
      taskset -c 1 "$LOAD" http --out "$OUT/r$round-$label" "$@" --http-target "$t" \
        > "$OUT/r$round-$label.log"
      sleep 0.3
      stats "$OUT/r$round-$label-after"
      echo "REDIS $(redis_delta "$OUT/r$round-$label-before" "$OUT/r$round-$label-after")" \
        >> "$OUT/r$round-$label.log"
      grep -E "^$label |^WARNING|^REDIS" "$OUT/r$round-$label.log"
    done
  done
  python3 benches/redis_sessions_table.py "$OUT" | tee "$OUT/summary.md"
fi

if [[ " $PARTS " == *" 2 "* ]]; then
  echo "== the first request of a session on another node ($ROUNDS x 300 sessions begun on A)"
  for round in $(seq 1 "$ROUNDS"); do
    taskset -c 1 python3 benches/redis_sessions_first.py "http://127.0.0.1:$((PORT + 1))/mcp" \
      "http://127.0.0.1:$((PORT + 2))/mcp" "$B" "$REDIS_PORT" 300 "$A" > "$OUT/first-$round.log"
    grep -v RESULT_JSON "$OUT/first-$round.log"
  done
  python3 benches/redis_sessions_table.py "$OUT" first | tee -a "$OUT/summary.md"
fi

if [[ " $PARTS " == *" 1 "* || " $PARTS " == *" 2 "* ]]; then
  kill "$LOCAL" "$LOCAL2" "$A" "$B"; wait "$LOCAL" "$LOCAL2" "$A" "$B" 2>/dev/null || true
fi

if [[ " $PARTS " == *" 3 "* ]]; then
  echo "== three nodes behind nginx (config/nginx-three-nodes.conf)"
  start_node node-1 $((PORT + 3)) "$OUT/node.toml" 0; N1=$NODE
  start_node node-2 $((PORT + 4)) "$OUT/node.toml" 0; N2=$NODE
  start_node node-3 $((PORT + 5)) "$OUT/node.toml" 0; N3=$NODE
  NGINX_PORT=$((PORT + 6))
  mkdir -p "$OUT/nginx/logs" "$OUT/nginx/tmp"
  sed -e "s/127.0.0.1:8765/127.0.0.1:$((PORT + 3))/" -e "s/127.0.0.1:8766/127.0.0.1:$((PORT + 4))/" \
      -e "s/127.0.0.1:8767/127.0.0.1:$((PORT + 5))/" -e "s/127.0.0.1:8080/127.0.0.1:$NGINX_PORT/" \
      config/nginx-three-nodes.conf > "$OUT/nginx/nginx.conf"
  taskset -c 1 nginx -p "$OUT/nginx" -e logs/error.log -c "$OUT/nginx/nginx.conf" & NGINX=$!
  pids+=($NGINX)
  until (exec 3<>"/dev/tcp/127.0.0.1/$NGINX_PORT") 2>/dev/null; do sleep 0.1; done
  NGINX_WORKER=$(pgrep -P "$NGINX" | head -1)
  LB=http://127.0.0.1:$NGINX_PORT/mcp
  for round in $(seq 1 "$ROUNDS"); do
    for t in "sessions,churn,$LB,$N1+$N2+$N3" "requests,session,$LB,$N1+$N2+$N3"; do
      label=${t%%,*}
      stats "$OUT/n$round-$label-before"
      n0=$(awk '{print $14 + $15}' "/proc/$NGINX_WORKER/stat")
      taskset -c 1 "$LOAD" http --out "$OUT/n$round-$label" "$@" --http-target "$t" \
        > "$OUT/n$round-$label.log"
      n1=$(awk '{print $14 + $15}' "/proc/$NGINX_WORKER/stat")
      sleep 0.3
      stats "$OUT/n$round-$label-after"
      echo "REDIS $(redis_delta "$OUT/n$round-$label-before" "$OUT/n$round-$label-after")" \
        >> "$OUT/n$round-$label.log"
      echo "NGINX_TICKS $((n1 - n0))" >> "$OUT/n$round-$label.log"
      grep -E "^$label |^WARNING|^REDIS|^NGINX" "$OUT/n$round-$label.log"
    done
  done
  python3 benches/redis_sessions_table.py "$OUT" nginx | tee -a "$OUT/summary.md"
  echo "== SIGKILL of node 2 under $SESSIONS sessions, a request each every 50 ms"
  taskset -c 1 python3 benches/redis_sessions_failover.py "$LB" "$N2" "$SESSIONS" 2 4 \
    | tee "$OUT/failover.log"
fi
echo "== logs in $OUT"
