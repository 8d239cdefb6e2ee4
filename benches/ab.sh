#!/usr/bin/env bash
# Two builds of mcp-ws on the real socket, alternated: each server alone on core 0, the
# generator on core 1, ROUNDS pairs (default 10), the order flipped every other pair.
# Prints each pair and the median new/old ratios of requests/s and p50 latency.
#
#   benches/ab.sh OLD_BINARY NEW_BINARY [generator args...]   e.g. --connections 16 --duration 4
#
# Build the old one from a worktree with its own target dir, e.g.
#   git worktree add /tmp/old <commit> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release)
set -euo pipefail
OLD=$1
NEW=$2
shift 2
cd "$(dirname "$0")/.."
LOAD=$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)
ROUNDS=${ROUNDS:-10}
PORT=${PORT_BASE:-18800}
OUT=$(mktemp -d)

measure() { # port binary [generator args...] -> "req/s p50_us"
  local port=$1 binary=$2 line pid
  shift 2
  RUST_LOG=warn taskset -c 0 "$binary" --listen 127.0.0.1:$port --config benches/load.toml &
  pid=$!
  sleep 0.7
  line=$(taskset -c 1 "$LOAD" --targets mcp-ws --url ws://127.0.0.1:$port/mcp --server-pid $pid \
    --out "$OUT" "$@" | awk '$1 == "mcp-ws" {print $3, $4}')
  kill $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  # Exactly one non-zero figure: a server that did not start (e.g. an old build refusing today's
  # load.toml) or several --connections values must stop the run, not skew the medians.
  if ! [[ $line =~ ^[1-9][0-9.]*\ [0-9]+$ ]]; then
    echo "ab.sh: no single figure from $binary on port $port (got '$line')" >&2
    return 1
  fi
  echo "$line"
}

for i in $(seq 1 "$ROUNDS"); do
  if [ $((i % 2)) -eq 1 ]; then
    old=$(measure $((PORT + 2 * i)) "$OLD" "$@"); new=$(measure $((PORT + 2 * i + 1)) "$NEW" "$@")
  else
    new=$(measure $((PORT + 2 * i)) "$NEW" "$@"); old=$(measure $((PORT + 2 * i + 1)) "$OLD" "$@")
  fi
  echo "pair $i: old $old  new $new"
done | tee "$OUT/pairs"
python3 - "$OUT/pairs" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
rps = [float(r[6]) / float(r[3]) for r in rows]
p50 = [float(r[7]) / float(r[4]) for r in rows]
print(f"new/old over {len(rows)} pairs: req/s median {statistics.median(rps):.3f} "
      f"(range {min(rps):.2f}-{max(rps):.2f}), p50 median {statistics.median(p50):.3f}")
EOF
