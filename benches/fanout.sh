#!/usr/bin/env bash
# list_changed fan-out (issue 9 §2): SESSIONS initialized WebSocket sessions (default 10 000) on
# an mcp-ws built on the library API (`load --serve-fanout`, core 0), held by the generator
# (core 1, another process); CHANGES registry changes (default 20), one at a time, each made
# by the server's control thread. Prints per change the writer's latency and the time until
# every session had its `notifications/tools/list_changed`, then p50/p99 and exactly-once.
#
#   benches/fanout.sh [generator args...]          e.g. --change-gap-ms 500 --client-threads 1
#   SESSIONS=1000 CHANGES=50 benches/fanout.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LOAD=$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)
SESSIONS=${SESSIONS:-10000}
CHANGES=${CHANGES:-20}
PORT=${PORT_BASE:-18885}
OUT=${OUT:-bench-results/fanout-$(date +%Y%m%d-%H%M%S)}
# Each side holds one descriptor per session.
ulimit -n 20000 2>/dev/null || true
taskset -c 0 "$LOAD" --serve-fanout --listen 127.0.0.1:$PORT --control 127.0.0.1:$((PORT + 1)) &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait 2>/dev/null || true' EXIT
sleep 1
taskset -c 1 "$LOAD" fanout --url ws://127.0.0.1:$PORT/mcp --server-pid $SERVER \
  --control 127.0.0.1:$((PORT + 1)) --sessions "$SESSIONS" --changes "$CHANGES" --out "$OUT" "$@" \
  | tee "$OUT.log"
