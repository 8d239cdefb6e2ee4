#!/usr/bin/env bash
# mcp-ws's gateway (`--stdio --`, per_session and shared) against supergateway 4.0.0 and
# mcp-proxy 0.13.0, each in front of the same stdio server (server-everything, tool `echo`),
# in the same run: gateway CPU per forwarded tools/call, latency added over calling the child
# directly, RSS and processes per session, sessions until the first error or cross-talk.
# Each gateway (and its children) alone on core 0, the generator (benches/gateway_load.rs)
# on core 1, as benches/pinned.sh. What each column means: benches/README.md, "Gateway".
#
#   benches/gateway.sh
#   ROUNDS=3 SECS=4 MAX_SESSIONS=100 ONLY="mcp-ws-ws sg-ws" benches/gateway.sh
#   SERVER=/path/to/mcp-ws LOAD=/path/to/gateway_load benches/gateway.sh   (prebuilt)
#   CONFIG=file.toml      mcp-ws's configuration (default config/default.toml, access log on)
#   local-ws (a row)      mcp-ws with its demo tools, calling its own `echo` over WebSocket:
#                         the same session with no upstream, what the gateway path adds to
#   PEER_LOGS=1           supergateway and mcp-proxy at their default log level (info: a line
#                         per message); by default they log nothing (--logLevel none,
#                         --log-level WARNING), the cheaper setting for them
#
# Needs node (22) on PATH, python3 (venv), taskset. Installs what is missing: the upstream
# (npm ci in tests/interop), supergateway (npm ci in benches/gateway), mcp-proxy (a venv in
# benches/gateway/.venv from benches/gateway/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-4}
MAX_SESSIONS=${MAX_SESSIONS:-100}
CONFIG=${CONFIG:-config/default.toml}
PORT=${PORT_BASE:-19300}
ALL="direct local-ws mcp-ws-ws mcp-ws-http mcp-ws-shared-ws mcp-ws-shared-http sg-ws sg-http mcp-proxy-http"
ONLY=${ONLY:-$ALL}
OUT=${OUT:-$(mktemp -d /tmp/gateway-bench.XXXXXX)}
mkdir -p "$OUT"
echo "== results in $OUT" >&2

UPSTREAM_JS=$ROOT/tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js
[ -f "$UPSTREAM_JS" ] || npm ci --prefix tests/interop >&2
SG_JS=$ROOT/benches/gateway/node_modules/supergateway/dist/index.js
[ -f "$SG_JS" ] || npm ci --prefix benches/gateway >&2
PROXY=$ROOT/benches/gateway/.venv/bin/mcp-proxy
if [ ! -x "$PROXY" ]; then
  python3 -m venv benches/gateway/.venv
  benches/gateway/.venv/bin/pip install -q -r benches/gateway/requirements.txt >&2
fi
UPSTREAM="$(command -v node) $UPSTREAM_JS stdio"

SERVER=${SERVER:-}
[ -n "$SERVER" ] || { cargo build --release --quiet; SERVER=${CARGO_TARGET_DIR:-target}/release/mcp-ws; }
LOAD=${LOAD:-$(cargo bench -p mcp-ws-benches --bench gateway_load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)}
[ -x "$LOAD" ] || { echo "gateway.sh: no load generator" >&2; exit 1; }

GW=
cleanup() { [ -z "$GW" ] || stop_gateway; }
trap cleanup EXIT

# start_gateway NAME PORT: the gateway on core 0 (its children inherit the core); sets GW,
# TRANSPORT and URL, waits until the port accepts.
start_gateway() {
  local name=$1 port=$2 log=$OUT/$1.log quiet_sg=(--logLevel none) quiet_proxy=(--log-level WARNING)
  if [ "${PEER_LOGS:-}" = 1 ]; then quiet_sg=(); quiet_proxy=(); fi
  case $name in
    local-ws)
      taskset -c 0 "$SERVER" --listen 127.0.0.1:$port --config "$CONFIG" 2>>"$log" & ;;
    mcp-ws-ws|mcp-ws-http)
      taskset -c 0 "$SERVER" --listen 127.0.0.1:$port --config "$CONFIG" --stdio -- $UPSTREAM 2>>"$log" & ;;
    mcp-ws-shared-*)
      taskset -c 0 "$SERVER" --listen 127.0.0.1:$port --config "$CONFIG" --mode shared --stdio -- $UPSTREAM 2>>"$log" & ;;
    sg-ws)
      taskset -c 0 node "$SG_JS" --stdio "$UPSTREAM" --outputTransport ws --port $port "${quiet_sg[@]}" >>"$log" 2>&1 & ;;
    sg-http)
      taskset -c 0 node "$SG_JS" --stdio "$UPSTREAM" --outputTransport streamableHttp --stateful --port $port "${quiet_sg[@]}" >>"$log" 2>&1 & ;;
    mcp-proxy-http)
      taskset -c 0 "$PROXY" --port $port "${quiet_proxy[@]}" -- $UPSTREAM >>"$log" 2>&1 & ;;
  esac
  GW=$!
  case $name in
    *-ws) TRANSPORT=ws ;;
    *) TRANSPORT=http ;;
  esac
  case $name in
    sg-ws) URL=ws://127.0.0.1:$port/message ;;
    *-ws) URL=ws://127.0.0.1:$port/mcp ;;
    *) URL=http://127.0.0.1:$port/mcp ;;
  esac
  for _ in $(seq 1 150); do
    if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then sleep 0.3; return 0; fi
    sleep 0.1
  done
  echo "gateway.sh: $name did not listen on $port (log: $log)" >&2
  return 1
}

# stop_gateway: SIGTERM to the gateway, then SIGKILL to what is left of its process group
# (the gateways that leave children behind).
stop_gateway() {
  local kids
  kids=$(pgrep -P "$GW" || true)
  kill "$GW" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$GW" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$GW" 2>/dev/null || true
  wait "$GW" 2>/dev/null || true
  # Children (and theirs) a gateway left behind.
  for k in $kids; do pkill -9 -P "$k" 2>/dev/null || true; kill -9 "$k" 2>/dev/null || true; done
  GW=
}

run() { # run NAME ROUND MODE [args]: one generator run on core 1, its JSON line kept
  local name=$1 round=$2 mode=$3 line
  shift 3
  line=$(taskset -c 1 "$LOAD" "$mode" --label "$name" "$@" 2>>"$OUT/$name.load.log" | grep '^GATEWAY_JSON ' || true)
  [ -n "$line" ] || line="GATEWAY_JSON {\"label\":\"$name\",\"mode\":\"$mode\",\"fatal\":\"no output\"}"
  echo "${line#GATEWAY_JSON } " | python3 -c "import json,sys; d=json.load(sys.stdin); d['round']=$round; print(json.dumps(d))" \
    | tee -a "$OUT/results.jsonl" | cut -c1-220 >&2
}

wanted() { [[ " $ONLY " == *" $1 "* ]]; }

for round in $(seq 1 "$ROUNDS"); do
  names=$ALL
  # Every other round in the opposite order.
  [ $((round % 2)) -eq 1 ] || names=$(echo $ALL | tr ' ' '\n' | tac | tr '\n' ' ')
  for name in $names; do
    wanted "$name" || continue
    if [ "$name" = direct ]; then
      run direct "$round" direct --cmd "$UPSTREAM" --core 0 --seconds "$SECS"
      continue
    fi
    PORT=$((PORT + 1))
    start_gateway "$name" $PORT
    local=0; [ "$name" != local-ws ] || local=1
    run "$name" "$round" latency --transport $TRANSPORT --url $URL --pid $GW --seconds "$SECS" --local $local
    run "$name" "$round" cpu --transport $TRANSPORT --url $URL --pid $GW --sessions 10 --seconds "$SECS" --local $local
    stop_gateway
  done
done

# Sessions: once per gateway, a fresh one.
for name in $ALL; do
  [ "$name" != direct ] && [ "$name" != local-ws ] && wanted "$name" || continue
  PORT=$((PORT + 1))
  start_gateway "$name" $PORT
  run "$name" 0 sessions --transport $TRANSPORT --url $URL --pid $GW --max "$MAX_SESSIONS" --step 10 --calls 5
  stop_gateway
done

python3 benches/gateway_table.py "$OUT/results.jsonl" "$MAX_SESSIONS" | tee "$OUT/table.md"
