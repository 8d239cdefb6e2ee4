#!/usr/bin/env bash
# Cost of idempotency-keyed requests (issue 11: "the Redis store's cost is reported
# separately"). Three mcp-ws configurations, each measured in the same generator run as
# actix-inline (C=16, P=16, 64 B), ROUNDS rounds:
#   unkeyed  benches/hardened.toml, requests without a key (de-duplicated by id, in session)
#   memory   the same server, every request with a fresh `_meta.idempotencyKey` (memory store)
#   redis    benches/hardened.toml + [redis], every request with a fresh key (Redis store)
# The server runs on core 0; the generator and redis-server share core 1, so Redis's CPU is
# not counted as the server's: it is reported on its own, per keyed request.
#
#   benches/idempotency.sh [generator args...]     e.g. --duration 5
#   ROUNDS=3 benches/idempotency.sh
#   SERVER=/path/to/mcp-ws benches/idempotency.sh   (a build to measure: none is made here)
#   LOAD=/path/to/load benches/idempotency.sh       (a load generator already built)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${SERVER:-}" ] || { cargo build --release --quiet; SERVER=target/release/mcp-ws; }
LOAD=${LOAD:-$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)}
ROUNDS=${ROUNDS:-3}
PORT=${PORT_BASE:-18960}
REDIS_PORT=$((PORT + 9))
OUT=${OUT:-bench-results/idempotency-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
REDIS_SERVER=$(command -v redis-server || echo /usr/bin/redis-server)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

taskset -c 1 "$REDIS_SERVER" --port $REDIS_PORT --bind 127.0.0.1 --save "" --appendonly no \
  --daemonize no >"$OUT/redis.log" 2>&1 &
REDIS=$!; pids+=($REDIS)
taskset -c 0 "$LOAD" --serve-baseline actix-inline --listen 127.0.0.1:$((PORT + 1)) >/dev/null &
AI=$!; pids+=($AI)
{ cat benches/hardened.toml; printf '\n[redis]\nurl = "redis://127.0.0.1:%s"\n' $REDIS_PORT; } \
  >"$OUT/hardened-redis.toml"
sleep 1

cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }

# run LABEL CONFIG [generator args...]: one line of figures on stdout, the raw output in $OUT
run() {
  local label=$1 config=$2 server redis_before redis_after result
  shift 2
  RUST_LOG=warn taskset -c 0 "$SERVER" --listen 127.0.0.1:$PORT --config "$config" &
  server=$!
  sleep 1
  redis_before=$(cpu_ticks $REDIS)
  result=$(MCP_WS_BEARER=bench-key-0123456789 taskset -c 1 "$LOAD" --targets mcp-ws,actix-inline \
    --url ws://127.0.0.1:$PORT/mcp --server-pid $server \
    --actix-inline-url ws://127.0.0.1:$((PORT + 1))/mcp --actix-inline-pid $AI \
    --connections 16 --pipeline 16 --payload 64 --out "$OUT" "$@" | tee -a "$OUT/$label.log" |
    grep '^RESULT_JSON ')
  redis_after=$(cpu_ticks $REDIS)
  kill $server; wait $server 2>/dev/null || true
  python3 - "$label" "$result" $((redis_after - redis_before)) "$(getconf CLK_TCK)" <<'EOF'
import json, sys
label, result, redis_ticks, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
targets = json.loads(result[len("RESULT_JSON "):])["targets"]
p = {t: targets[t]["points"][0] for t in targets}
bad = sum(p["mcp-ws"][k] for k in ("errors", "lost", "mismatched"))
per_cpu = {t: p[t]["requests_per_sec"] / p[t]["server_cpu_cores"] for t in p}
# Redis's CPU over the whole run (warm-up and drain included) per answered request.
redis_us = redis_ticks / hz / max(p["mcp-ws"]["answered"], 1) * 1e6
print(f"{label:8} mcp-ws {p['mcp-ws']['requests_per_sec']:>9.0f} req/s, "
      f"{per_cpu['mcp-ws']:>9.0f} per server CPU-s; actix-inline {per_cpu['actix-inline']:>9.0f}; "
      f"ratio {per_cpu['mcp-ws'] / per_cpu['actix-inline']:.3f}; p50 {p['mcp-ws']['latency_us']['p50']} us; "
      f"redis {redis_us:.2f} us CPU/request; errors/lost/mismatched {bad}")
EOF
}

for round in $(seq 1 "$ROUNDS"); do
  echo "round $round"
  run unkeyed benches/hardened.toml "$@"
  run memory benches/hardened.toml --idempotency-keys "$@"
  run redis "$OUT/hardened-redis.toml" --idempotency-keys "$@"
done | tee "$OUT/summary.txt"
