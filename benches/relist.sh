#!/usr/bin/env bash
# Server CPU spent on a shared upstream's tool list replaced whole: N tools renamed by the
# upstream, one notifications/tools/list_changed, one re-list (attack run 52c, G1: every
# entry was a registry rebuild and a notification of its own). The upstream is the tests'
# FastMCP fixture (tests/interop/gateway_upstream.py, GATEWAY_MANY=N, tool rename_many).
#
#   benches/relist.sh [N] [mcp-ws binary] [port]     (defaults: 8000, target/release/mcp-ws, 20411)
#
# The server runs with config/default.toml (its log filter) plus the upstream, alone on
# core 0. Prints the server's CPU time (utime + stime, 1/100 s ticks, from /proc) from just
# before the rename to when it stops growing, and checks the re-list took effect. Needs the
# tests' Python venv (tests/interop/.venv: `cargo test --test it interop_py_sdk` makes it),
# curl and taskset.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
N=${1:-8000}
BIN=${2:-target/release/mcp-ws}
PORT=${3:-20411}
PYTHON=$ROOT/tests/interop/.venv/bin/python
[ -x "$PYTHON" ] || { echo "no $PYTHON: run cargo test --test it interop_py_sdk first" >&2; exit 1; }
[ $# -ge 2 ] || cargo build --release --quiet
D=$(mktemp -d /tmp/relist.XXXXXX)
sed "s/^listen = .*/listen = \"127.0.0.1:$PORT\"/" config/default.toml > "$D/config.toml"
grep -q "^listen = \"127.0.0.1:$PORT\"" "$D/config.toml"
cat >> "$D/config.toml" <<CFG

[[upstreams]]
name = "py"
command = "$PYTHON"
args = ["$ROOT/tests/interop/gateway_upstream.py"]
mode = "shared"
env = { GATEWAY_MANY = "$N" }
CFG
taskset -c 0 "$BIN" --config "$D/config.toml" > "$D/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -r "$D"' EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.2; done
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
# Waits until the server's CPU time stops growing (2 s without a tick).
settle() { local prev; prev=$(cpu); sleep 2; while [ "$(cpu)" != "$prev" ]; do prev=$(cpu); sleep 2; done; }
H=(-s -H 'content-type: application/json' -H 'accept: application/json, text/event-stream'
   -H 'MCP-Protocol-Version: 2025-11-25')
URL=http://127.0.0.1:$PORT/mcp
SID=$(curl "${H[@]}" -D - -o /dev/null "$URL" -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"relist","version":"1"}}}' \
  | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{print $2}')
call() { curl "${H[@]}" -H "Mcp-Session-Id: $SID" "$URL" -d "{\"jsonrpc\":\"2.0\",\"id\":$1,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3}}"; }
curl "${H[@]}" -H "Mcp-Session-Id: $SID" -o /dev/null "$URL" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
# The upstream listed (the server's first listing of N tools is the same work: waited for).
for _ in $(seq 600); do call 2 py__grow '{"name":"warm"}' | grep -q grew && break; sleep 0.5; done
settle
before=$(cpu)
call 3 py__rename_many '{"prefix":"b"}' | grep -q renamed
settle
after=$(cpu)
old=$(call 4 "py__a_$((N - 1))" '{}')
new=$(call 5 "py__b_$((N - 1))" '{}')
echo "$old" | grep -q '"code":-32602' && echo "$new" | grep -q '"result"' \
  || { echo "the re-list did not take effect: $old / $new" >&2; exit 1; }
echo "$BIN, N=$N: server CPU for the re-list $((after - before)) ticks (1/100 s)"
