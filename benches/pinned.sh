#!/usr/bin/env bash
# The recommended load run (benches/README.md): each server alone on core 0, the generator
# on core 1, every target measured one after another in the same run.
#   benches/pinned.sh [generator args...]      e.g. --connections 1,16,64 --payload 64
#   CONFIG=benches/hardened.toml MCP_WS_BEARER=bench-key-0123456789 benches/pinned.sh ...
#                                   (mcp-ws with another config; the token goes to every target)
#   CONFIG=benches/load.toml benches/pinned.sh sessions --sessions 18000 --hold 10
#                                   (room for more than the shipped 10 000 sessions)
#   The figures are of the shipped configuration, config/default.toml with its log filter
#   (access log on, written to a file), unless told otherwise:
#   CONFIG=file.toml                (mcp-ws with another configuration)
#   SERVER_LOG=warn                 (the server's RUST_LOG; warn turns the access log off)
#   BARE=0                          (this run only; by default, when neither CONFIG nor SERVER_LOG
#                                    is given, the same run follows on the bare configuration,
#                                    CONFIG=benches/bare.toml SERVER_LOG=warn: hardening and
#                                    access log off, printed beside the shipped one)
#   The server's log goes to SERVER_LOG_FILE (default a new /tmp/mcp-ws-bench.*.log, deleted
#                                    when the run ends unless KEEP_LOG=1).
#   SERVER=/path/to/other/mcp-ws LOAD=/path/to/load benches/pinned.sh ...
#                                   (given builds: then nothing is built here)
#   TOUCH_MEMORY=1                  (first touch every page of available memory once: on a
#                                    fresh VM, see benches/common.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/common.sh
touch_memory
# The shipped configuration's run, then the same run on the bare one beside it: by default
# when neither CONFIG nor SERVER_LOG names another configuration (BARE=0: this run only).
bare_default
bare_beside "$@"
CONFIG=${CONFIG:-config/default.toml}
# The server's RUST_LOG: unset, logging.filter of the config decides.
[ -z "${SERVER_LOG:-}" ] || export RUST_LOG=$SERVER_LOG
[ -n "${SERVER_LOG:-}" ] || unset RUST_LOG
echo "== mcp-ws configuration: $CONFIG, log filter: ${SERVER_LOG:-logging.filter of the config}" >&2
SERVER=${SERVER:-}
[ -n "$SERVER" ] || { cargo build --release --quiet; SERVER=target/release/mcp-ws; }
# LOAD: a load generator already built (as in callgrind.sh).
LOAD=${LOAD:-$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)}
PORT_BASE=${PORT_BASE:-18765}
pids=()
# A log file of the run's own is deleted when it ends (`drop_log`, benches/common.sh).
OWN_LOG=
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  drop_log "$OWN_LOG"
}
trap cleanup EXIT
prlimit --pid $$ --nofile=20000:20000 2>/dev/null || true
ulimit -n 20000 2>/dev/null || true

[ -n "${SERVER_LOG_FILE:-}" ] || { SERVER_LOG_FILE=$(mktemp /tmp/mcp-ws-bench.XXXXXX.log); OWN_LOG=$SERVER_LOG_FILE; }
echo "== the server's log: $SERVER_LOG_FILE" >&2
taskset -c 0 "$SERVER" --listen 127.0.0.1:$PORT_BASE --config "$CONFIG" 2>"$SERVER_LOG_FILE" &
MCP=$!; pids+=($MCP)
taskset -c 0 "$LOAD" --serve-baseline raw-echo --listen 127.0.0.1:$((PORT_BASE + 1)) >/dev/null & RAW=$!; pids+=($RAW)
taskset -c 0 "$LOAD" --serve-baseline jsonrpsee --listen 127.0.0.1:$((PORT_BASE + 2)) >/dev/null & JR=$!; pids+=($JR)
taskset -c 0 "$LOAD" --serve-baseline actix-inline --listen 127.0.0.1:$((PORT_BASE + 3)) >/dev/null & AI=$!; pids+=($AI)
taskset -c 0 "$LOAD" --serve-baseline actix-naive --listen 127.0.0.1:$((PORT_BASE + 4)) >/dev/null & AN=$!; pids+=($AN)
sleep 1
taskset -c 1 "$LOAD" "$@" \
  --url ws://127.0.0.1:$PORT_BASE/mcp --server-pid $MCP \
  --raw-echo-url ws://127.0.0.1:$((PORT_BASE + 1))/mcp --raw-echo-pid $RAW \
  --jsonrpsee-url ws://127.0.0.1:$((PORT_BASE + 2))/mcp --jsonrpsee-pid $JR \
  --actix-inline-url ws://127.0.0.1:$((PORT_BASE + 3))/mcp --actix-inline-pid $AI \
  --actix-naive-url ws://127.0.0.1:$((PORT_BASE + 4))/mcp --actix-naive-pid $AN
