#!/usr/bin/env bash
# Streamable HTTP `tools/call` echo (issue 10): mcp-ws against rmcp 3.11 (stateless JSON mode
# and its default, stateful SSE) and tower-mcp 0.25 (JSON), each server alone on core 0, the
# generator on core 1 (C keep-alive connections, one request in flight each), all in the same
# run; then mcp-ws, rmcp (JSON) and tower-mcp answering the same call as a 2026-07-28
# stateless request. Prints the table of every run, then medians and same-run ratios
# (mcp-ws / other), per era.
#
#   benches/http.sh [generator args...]     e.g. --connections 16 --payload 64 --duration 5
#   RUNS=5 benches/http.sh                  five runs (default 3); OUT=dir keeps the logs
#   The figures are of the shipped configuration, config/default.toml with its log filter
#   (access log on, written to a file), unless told otherwise:
#   CONFIG=file.toml                (mcp-ws with another configuration)
#   SERVER_LOG=warn                 (the server's RUST_LOG; warn turns the access log off)
#   BARE=0                          (this run only; by default, when neither CONFIG nor SERVER_LOG
#                                    is given, the same run follows on the bare configuration,
#                                    CONFIG=benches/bare.toml SERVER_LOG=warn: hardening and
#                                    access log off, printed beside the shipped one)
#   The server's log goes to $OUT/mcp-ws.log, deleted when the run ends unless KEEP_LOG=1.
#
# The peers are standalone cargo projects in benches/peers/ (own [workspace], own target dir
# target/peers), built here.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/common.sh
# The shipped configuration's run, then the same run on the bare one beside it: by default
# when neither CONFIG nor SERVER_LOG names another configuration (BARE=0: this run only).
bare_default
bare_beside "$@"
CONFIG=${CONFIG:-config/default.toml}
# The server's RUST_LOG: unset, logging.filter of the config decides.
[ -z "${SERVER_LOG:-}" ] || export RUST_LOG=$SERVER_LOG
[ -n "${SERVER_LOG:-}" ] || unset RUST_LOG
echo "== mcp-ws configuration: $CONFIG, log filter: ${SERVER_LOG:-logging.filter of the config}" >&2
cargo build --release --quiet
# LOAD: a load generator already built (it does not depend on the server's code).
LOAD=${LOAD:-$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)}
PEERS=$PWD/target/peers
for peer in rmcp tower-mcp; do
  CARGO_TARGET_DIR=$PEERS cargo build --release --quiet --manifest-path benches/peers/$peer/Cargo.toml
done
RUNS=${RUNS:-3}
PORT=${PORT_BASE:-18865}
OUT=${OUT:-bench-results/http-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; drop_log "$OUT/mcp-ws.log"; }
trap cleanup EXIT

taskset -c 0 target/release/mcp-ws --listen 127.0.0.1:$PORT --config "$CONFIG" 2>"$OUT/mcp-ws.log" &
MCP=$!; pids+=($MCP)
taskset -c 0 "$PEERS/release/bench-rmcp" 127.0.0.1:$((PORT + 1)) & RMCP_SSE=$!; pids+=($RMCP_SSE)
MODE=stateless-json taskset -c 0 "$PEERS/release/bench-rmcp" 127.0.0.1:$((PORT + 2)) & RMCP_JSON=$!
pids+=($RMCP_JSON)
taskset -c 0 "$PEERS/release/bench-tower" 127.0.0.1:$((PORT + 3)) & TOWER=$!; pids+=($TOWER)
sleep 1

for run in $(seq 1 "$RUNS"); do
  echo "== run $run/$RUNS"
  taskset -c 1 "$LOAD" http --out "$OUT/run-$run" "$@" \
    --http-target mcp-ws,session,http://127.0.0.1:$PORT/mcp,$MCP \
    --http-target rmcp-json,stateless,http://127.0.0.1:$((PORT + 2))/mcp,$RMCP_JSON \
    --http-target rmcp-sse,session,http://127.0.0.1:$((PORT + 1))/mcp,$RMCP_SSE \
    --http-target tower-mcp,session,http://127.0.0.1:$((PORT + 3))/mcp,$TOWER \
    | tee "$OUT/run-$run.log"
  # The same servers answering 2026-07-28 stateless requests (`_meta`, no initialize, the
  # revision's headers); tower-mcp is built with its `protocol-2026-07-28` feature.
  taskset -c 1 "$LOAD" http --out "$OUT/modern-$run" "$@" \
    --http-target mcp-ws,modern,http://127.0.0.1:$PORT/mcp,$MCP \
    --http-target rmcp-json,modern,http://127.0.0.1:$((PORT + 2))/mcp,$RMCP_JSON \
    --http-target tower-mcp,modern,http://127.0.0.1:$((PORT + 3))/mcp,$TOWER \
    | tee "$OUT/modern-$run.log"
done
{
  echo "## 2025-11-25 requests (sessions; rmcp-json: its stateless mode)"
  python3 benches/median.py "$OUT"/run-*.log
  echo
  echo "## 2026-07-28 stateless requests"
  python3 benches/median.py "$OUT"/modern-*.log
} | tee "$OUT/summary.md"
