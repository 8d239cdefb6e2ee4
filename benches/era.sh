#!/usr/bin/env bash
# Era cost (issue 12): the same `tools/call` echo as a 2026-07-28 stateless request (`_meta`,
# no initialize) and as a 2025-11-25 session request, against ONE mcp-ws pinned to core 0
# (generator on core 1), over WebSocket (C=16, P=16) and over Streamable HTTP (C=16, one in
# flight each). ROUNDS alternating pairs per transport (order flipped every other pair);
# prints server CPU per request for each run and the median modern/legacy ratio. Over
# WebSocket each round also measures a legacy request padded to the modern one's length
# (`--era 2025-11-25-padded`), which tells the bigger frame's own cost from the rest.
#
#   benches/era.sh [generator args...]      e.g. --duration 4 --payload 64
#   ROUNDS=6 TRANSPORTS="ws http" benches/era.sh
#   SERVER=/path/to/other/mcp-ws benches/era.sh    (another build; then nothing is built here)
#   The figures are of the shipped configuration, config/default.toml with its log filter
#   (access log on, written to a file), unless told otherwise:
#   CONFIG=file.toml                (mcp-ws with another configuration)
#   SERVER_LOG=warn                 (the server's RUST_LOG; warn turns the access log off)
#   BARE=0                          (this run only; by default, when neither CONFIG nor SERVER_LOG
#                                    is given, the same run follows on the bare configuration,
#                                    CONFIG=benches/bare.toml SERVER_LOG=warn: hardening and
#                                    access log off, printed beside the shipped one)
#   The server's log goes to $OUT/mcp-ws.log, deleted when the run ends unless KEEP_LOG=1.
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
SERVER=${SERVER:-}
[ -n "$SERVER" ] || { cargo build --release --quiet; SERVER=target/release/mcp-ws; }
# LOAD: a load generator already built (it does not depend on the server's code).
LOAD=${LOAD:-$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)}
ROUNDS=${ROUNDS:-6}
TRANSPORTS=${TRANSPORTS:-ws http}
PORT=${PORT_BASE:-18875}
OUT=${OUT:-bench-results/era-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
taskset -c 0 "$SERVER" --listen 127.0.0.1:$PORT --config "$CONFIG" 2>"$OUT/mcp-ws.log" &
MCP=$!
trap 'kill $MCP 2>/dev/null || true; wait 2>/dev/null || true; drop_log "$OUT/mcp-ws.log"' EXIT
sleep 1

# measure TRANSPORT ERA [args] -> one line "transport era rps cpu_cores p50 p99 bad" on stdout
measure() {
  local transport=$1 era=$2 log
  shift 2
  log="$OUT/$transport-$era-$(date +%s%N).log"
  if [ "$transport" = ws ]; then
    taskset -c 1 "$LOAD" --targets mcp-ws --url ws://127.0.0.1:$PORT/mcp --server-pid $MCP \
      --connections 16 --pipeline 16 --era "$era" --out "$OUT/last" "$@" >"$log"
  else
    local dialect=session
    [ "$era" = 2026-07-28 ] && dialect=modern
    taskset -c 1 "$LOAD" http --http-target mcp-ws,$dialect,http://127.0.0.1:$PORT/mcp,$MCP \
      --connections 16 --out "$OUT/last" "$@" >"$log"
  fi
  python3 - "$log" "$transport" "$era" <<'PY'
import json, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("RESULT_JSON "))
p = json.loads(line[len("RESULT_JSON "):])["targets"]["mcp-ws"]["points"][0]
bad = p["lost"] + p["mismatched"] + p["errors"]
print(sys.argv[2], sys.argv[3], p["requests_per_sec"], p["server_cpu_cores"],
      p["latency_us"]["p50"], p["latency_us"]["p99"], bad)
PY
}

for transport in $TRANSPORTS; do
  for i in $(seq 1 "$ROUNDS"); do
    if [ $((i % 2)) -eq 1 ]; then
      measure "$transport" 2025-11-25 "$@"; measure "$transport" 2026-07-28 "$@"
    else
      measure "$transport" 2026-07-28 "$@"; measure "$transport" 2025-11-25 "$@"
    fi
    # WebSocket: also a 2025-11-25 request padded to the 2026-07-28 one's length with
    # `_meta` members no server knows, to tell the bigger frame's cost from the rest.
    if [ "$transport" = ws ]; then measure ws 2025-11-25-padded "$@"; fi
  done
done | tee "$OUT/runs.txt"

python3 - "$OUT/runs.txt" <<'PY' | tee "$OUT/summary.md"
import statistics, sys
from collections import defaultdict
runs = defaultdict(lambda: defaultdict(list))
for line in open(sys.argv[1]):
    transport, era, rps, cpu, p50, p99, bad = line.split()
    if int(bad):
        sys.exit(f"era.sh: {bad} lost/mismatched/error answers in a {transport} {era} run; no figure")
    runs[transport][era].append((float(rps), float(cpu), int(p50), int(p99)))
print("| transport | era | runs | req/s (median) | server CPU µs/request (median) | p50 µs | p99 µs |")
print("|---|---|---|---|---|---|---|")
for transport, eras in runs.items():
    for era, rows in sorted(eras.items()):
        print(f"| {transport} | {era} | {len(rows)} | {statistics.median(r[0] for r in rows):,.0f} "
              f"| {statistics.median(r[1] * 1e6 / r[0] for r in rows):.2f} "
              f"| {statistics.median(r[2] for r in rows)} | {statistics.median(r[3] for r in rows)} |")
print()
for transport, eras in runs.items():
    # Pairs in run order: the i-th legacy run with the i-th modern run (adjacent in time).
    ratios = [(m[1] / m[0]) / (l[1] / l[0]) for l, m in zip(eras["2025-11-25"], eras["2026-07-28"])]
    print(f"{transport}: 2026-07-28 / 2025-11-25 server CPU per request, median of {len(ratios)} pairs: "
          f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); goal <= 1.10")
    if "2025-11-25-padded" in eras:
        # The same frame length without the meaning: the part of the cost that is parsing.
        padded = [(p[1] / p[0]) / (l[1] / l[0]) for l, p in zip(eras["2025-11-25"], eras["2025-11-25-padded"])]
        print(f"{transport}: 2025-11-25 padded to the same length / 2025-11-25, median of {len(padded)}: "
              f"{statistics.median(padded):.3f} (range {min(padded):.3f}-{max(padded):.3f})")
PY
