#!/usr/bin/env bash
# Server instructions per answered request, counted by callgrind: reproducible to about 1% on
# a noisy machine, where wall-clock figures drift by tens of percent between runs. Use it to
# compare two builds of the hot path; use benches/pinned.sh for throughput and latency.
#
#   benches/callgrind.sh [payload-bytes] [mcp-ws binary]     (defaults: 64, target/release/mcp-ws)
#   TARGET=actix-inline benches/callgrind.sh [payload-bytes]  (a baseline instead, same workload)
#   CONFIG=my.toml benches/callgrind.sh                       (mcp-ws with another config than
#                                                              config/default.toml, e.g. dedup off)
#   SERVER_LOG=warn benches/callgrind.sh                      (the server's RUST_LOG; default unset:
#                                                              the config's filter, access log on)
#   BARE=0 benches/callgrind.sh                               (the shipped run only; by default it is
#                                                              followed by the bare configuration,
#                                                              benches/bare.toml with SERVER_LOG=warn,
#                                                              and the ratio of the two figures)
#
# The figure is of the shipped configuration (config/default.toml, its log filter: the access
# log on, written to $OUT.log, deleted after a successful run unless KEEP_LOG=1) unless
# CONFIG / SERVER_LOG say otherwise; the run prints which.
#   TRANSPORT=http [ERA=2026-07-28] benches/callgrind.sh      (over Streamable HTTP: 16 keep-alive
#                                                              connections, one request each)
#   ERA=2026-07-28 benches/callgrind.sh                       (mcp-ws: stateless 2026-07-28
#                                                              requests, `_meta` and no initialize)
#   LOAD_ARGS=--idempotency-keys benches/callgrind.sh         (more generator arguments: here
#                                                              a fresh idempotency key per request)
#
# The server runs under valgrind on core 0; the generator drives it from core 1 with 16
# connections x 16 pipelined `tools/call echo` for 10 s. Needs valgrind (callgrind_annotate).
set -euo pipefail
cd "$(dirname "$0")/.."
# The shipped configuration's run, then the same run on the bare one beside it, and the two
# figures' ratio: by default for mcp-ws when neither CONFIG nor SERVER_LOG names another
# configuration (BARE=0: this run only).
. benches/common.sh
[ "${TARGET:-mcp-ws}" = mcp-ws ] || BARE=${BARE:-0}
bare_default
if [ "$BARE" = 1 ]; then
  RUNS=$(mktemp -d)
  trap 'rm -r "$RUNS"' EXIT
  BARE=0 "$0" "$@" | tee "$RUNS/shipped"
  echo "== beside it, the bare configuration: CONFIG=benches/bare.toml SERVER_LOG=warn"
  BARE=0 CONFIG=benches/bare.toml SERVER_LOG=warn "$0" "$@" | tee "$RUNS/bare"
  per_request() { sed -n 's/.* \([0-9]*\) instructions per request.*/\1/p' "$1" | tail -1; }
  python3 -c 'import sys; s, b = map(int, sys.argv[1:]); print(f"shipped {s} / bare {b} instructions per request: {s / b:.3f}x")' \
    "$(per_request "$RUNS/shipped")" "$(per_request "$RUNS/bare")"
  exit
fi
CONFIG=${CONFIG:-config/default.toml}
# The server's RUST_LOG: unset, logging.filter of the config decides.
[ -z "${SERVER_LOG:-}" ] || export RUST_LOG=$SERVER_LOG
[ -n "${SERVER_LOG:-}" ] || unset RUST_LOG
echo "== mcp-ws configuration: $CONFIG, log filter: ${SERVER_LOG:-logging.filter of the config}" >&2
PAYLOAD=${1:-64}
SERVER=${2:-target/release/mcp-ws}
TARGET=${TARGET:-mcp-ws}
ERA=${ERA:-2025-11-25}
# A given binary is used as is; only the default one (and only for mcp-ws) is built here.
[ $# -ge 2 ] || [ "$TARGET" != mcp-ws ] || cargo build --release --quiet
# LOAD: a load generator already built (it does not depend on the server's code).
LOAD=${LOAD:-$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)}
PORT=${PORT:-18790}
OUT=$(mktemp /tmp/callgrind.$TARGET.XXXXXX)
# The generator's output directory, removed however the script ends.
LOAD_OUT=$(mktemp -d)

if [ "$TARGET" = mcp-ws ]; then
  SERVE=("$SERVER" --listen 127.0.0.1:$PORT --config "$CONFIG")
  URL_FLAG=--url
else
  SERVE=("$LOAD" --serve-baseline "$TARGET" --listen 127.0.0.1:$PORT)
  URL_FLAG=--$TARGET-url
fi
taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$OUT" "${SERVE[@]}" \
  >"$OUT.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true; rm -rf "$LOAD_OUT"' EXIT
sleep 6 # valgrind starts slowly
if [ "${TRANSPORT:-ws}" = http ]; then
  # Streamable HTTP: 16 keep-alive connections, one request in flight each; a 2025-11-25
  # session (`session`) or 2026-07-28 requests (`modern`), by ERA.
  [ "$TARGET" = mcp-ws ] || { echo "callgrind.sh: TRANSPORT=http measures mcp-ws only" >&2; exit 2; }
  DIALECT=$([ "$ERA" = 2026-07-28 ] && echo modern || echo session)
  RESULT=$(taskset -c 1 "$LOAD" http --http-target "mcp-ws,$DIALECT,http://127.0.0.1:$PORT/mcp" \
    --connections 16 --payload "$PAYLOAD" --duration 10 --warmup 0.1 ${LOAD_ARGS:-} \
    --out "$LOAD_OUT" | grep '^RESULT_JSON ')
else
  RESULT=$(taskset -c 1 "$LOAD" --targets "$TARGET" "$URL_FLAG" ws://127.0.0.1:$PORT/mcp \
    --connections 16 --pipeline 16 --payload "$PAYLOAD" --duration 10 --warmup 0.1 --era "$ERA" ${LOAD_ARGS:-} \
    --out "$LOAD_OUT" | grep '^RESULT_JSON ')
fi
kill -TERM $SERVER_PID # mcp-ws drains and exits; a baseline ends on SIGTERM (callgrind still writes its profile)
wait $SERVER_PID 2>/dev/null || true
trap - EXIT
rm -rf "$LOAD_OUT"

# Answered requests; a run with errors, lost or mismatched answers gives no figure.
ANSWERED=$(python3 -c '
import json, sys
point = json.loads(sys.argv[1][len("RESULT_JSON "):])["targets"][sys.argv[2]]["points"][0]
bad = point["errors"] + point["lost"] + point["mismatched"]
sys.exit(f"callgrind.sh: {bad} errors/lost/mismatched answers; no figure") if bad else print(point["answered"])
' "$RESULT" "$TARGET")
# The whole process, start-up included; start-up is well under 1% of a 10 s run.
INSTRUCTIONS=$(callgrind_annotate "$OUT" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
# The server's output (valgrind's and the access log's lines) is kept only when asked
# (KEEP_LOG=1) or when the run failed before this point, as the other scripts' logs are.
drop_log "$OUT.log"
KEPT=$([ -e "$OUT.log" ] && echo ", server output: $OUT.log" || true)
echo "$TARGET, ${TRANSPORT:-ws}, era $ERA, payload ${PAYLOAD} B: ${INSTRUCTIONS} instructions, ${ANSWERED} requests answered," \
  "$((INSTRUCTIONS / ANSWERED)) instructions per request (profile: $OUT$KEPT)"
