#!/usr/bin/env bash
# The server's CPU per request split into user and kernel time, with the access log on (the
# shipped config/default.toml and its log filter) and off (RUST_LOG=info,mcp_ws::access=off),
# alternated: what the access line costs in instructions (user) and in writing it out
# (kernel). The server runs alone on core 0, the generator on core 1 (16 connections x 16
# pipelined 64 B `tools/call echo`, 5 s); its utime and stime are read from /proc before and
# after, so connection setup is counted too (a few milliseconds of the run). Where `perf` can
# read the server's tracepoints, the same window's system calls and context switches per
# request are counted too (PERF=0 leaves them out).
#
#   benches/cpu_split.sh [mcp-ws binary]        (default: target/release/mcp-ws, built here)
#   LOG_TO=/dev/null benches/cpu_split.sh ...   (where the server's log goes; default a new
#                                                file in /tmp, as a supervisor's file would,
#                                                deleted at the end unless KEEP_LOG=1)
#   ROUNDS=5 benches/cpu_split.sh ...           (pairs of runs, default 3)
#   LOAD=/path/to/load benches/cpu_split.sh ... (a load generator already built)
#   TOUCH_MEMORY=1 benches/cpu_split.sh ...     (first touch every page of available memory
#                                                once: on a fresh VM, see benches/common.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER=${1:-target/release/mcp-ws}
[ $# -ge 1 ] || cargo build --release --quiet
LOAD=${LOAD:-$(cargo bench -p mcp-ws-benches --bench load --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))/\1/p' | tail -1)}
. benches/common.sh
touch_memory
# A log file of its own is deleted at the end (`drop_log`); a given LOG_TO is left alone.
OWN_LOG=
[ -n "${LOG_TO:-}" ] || { LOG_TO=$(mktemp /tmp/mcp-ws-cpu-split.XXXXXX.log); OWN_LOG=$LOG_TO; }
PORT=${PORT:-18950}
TICKS=$(getconf CLK_TCK)
# The runs' figures, perf counts and generator outputs, removed however the script ends.
WORK=$(mktemp -d)
RESULTS=$WORK/results
# The server of the run under way, stopped however the script ends (a failed run included);
# a perf attached to it ends with it.
SERVER_PID=
trap '[ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true; drop_log "$OWN_LOG"; rm -rf "$WORK"' EXIT

# The CPU ticks (user + kernel) of the server's log writer thread (`mcp-ws-log`), 0 if it
# has none: its share of a request is the file's or pipe's write, apart from the event loop.
log_thread_ticks() { # pid
  local task comm stat fields
  for task in /proc/"$1"/task/*; do
    read -r comm 2>/dev/null <"$task/comm" || continue
    [ "$comm" = mcp-ws-log ] || continue
    read -r stat 2>/dev/null <"$task/stat" || break
    # After the `)` that ends the thread's name come state, ...: utime and stime are the
    # 12th and 13th of those.
    read -ra fields <<<"${stat##*) }"
    echo $((fields[11] + fields[12]))
    return
  done
  echo 0
}

run() { # label [env assignments...]
  local label=$1
  shift
  env "$@" taskset -c 0 "$SERVER" --listen 127.0.0.1:$PORT --config config/default.toml 2>"$LOG_TO" &
  SERVER_PID=$!
  local pid=$SERVER_PID
  sleep 1
  local before after result counts perf_pid=
  counts=$WORK/counts
  : >"$counts" # empty when perf counts nothing
  if [ "${PERF:-1}" = 1 ] && command -v perf >/dev/null 2>&1; then
    perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$pid" -o "$counts" 2>/dev/null &
    perf_pid=$!
  fi
  before=$(awk '{print $14, $15}' "/proc/$pid/stat")
  before="$before $(log_thread_ticks "$pid")"
  result=$(taskset -c 1 "$LOAD" --targets mcp-ws --url ws://127.0.0.1:$PORT/mcp \
    --connections 16 --pipeline 16 --payload 64 --duration 5 --warmup 0 --out "$WORK/load" \
    | grep '^RESULT_JSON ' | sed 's/^RESULT_JSON //')
  after=$(awk '{print $14, $15}' "/proc/$pid/stat")
  after="$after $(log_thread_ticks "$pid")"
  [ -z "$perf_pid" ] || { kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; }
  kill -TERM $pid
  wait $pid 2>/dev/null || true
  SERVER_PID=
  python3 -c '
import json, sys
label, ticks, before, after, result, counts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
point = json.loads(result)["targets"]["mcp-ws"]["points"][0]
if point["errors"] or point["lost"] or point["mismatched"]:
    sys.exit(f"{label}: errors, lost or mismatched answers: no figure")
n = point["answered"]
(u0, s0, l0), (u1, s1, l1) = (map(int, before.split()), map(int, after.split()))
user, kernel = (u1 - u0) / ticks * 1e6 / n, (s1 - s0) / ticks * 1e6 / n
log = (l1 - l0) / ticks * 1e6 / n
# perf stat -x, lines: count,unit,event,...; "-" where perf counted nothing.
event = {}
for line in open(counts):
    fields = line.strip().split(",")
    if len(fields) > 2 and fields[0].isdigit():
        event[fields[2]] = int(fields[0]) / n
per = lambda name: f"{event[name]:.4f}" if name in event else "-"
calls, switches = per("raw_syscalls:sys_enter"), per("context-switches")
print(f"{label} {n} {user:.3f} {kernel:.3f} {user + kernel:.3f} {calls} {switches} {log:.3f}")
' "$label" "$TICKS" "$before" "$after" "$result" "$counts" | tee -a "$RESULTS"
  rm -f "$counts"
}

echo "== $SERVER, log to $LOG_TO; columns: configuration, answered, user, kernel, total (µs of server CPU per request), system calls and context switches per request, the log writer thread's µs per request (part of the total)"
for _ in $(seq 1 "${ROUNDS:-3}"); do
  run shipped -u RUST_LOG
  run access-off RUST_LOG=info,mcp_ws::access=off
done
python3 -c '
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
median = {}
for label in ("shipped", "access-off"):
    mine = [r for r in rows if r[0] == label]
    median[label] = [statistics.median(float(r[i]) for r in mine) for i in (2, 3, 4)]
    print(f"median {label}: user {median[label][0]:.3f} kernel {median[label][1]:.3f} total {median[label][2]:.3f}")
    calls = [float(r[5]) for r in mine if len(r) > 6 and r[5] != "-"]
    switches = [float(r[6]) for r in mine if len(r) > 6 and r[6] != "-"]
    if calls and switches:
        print(f"  per request: system calls {statistics.median(calls):.4f}, context switches {statistics.median(switches):.4f}")
    median[label].append(statistics.median(float(r[7]) for r in mine))
    print(f"  of the total, the log writer thread: {median[label][3]:.3f}")
s, o = median["shipped"], median["access-off"]
print(f"shipped / access-off: user {s[0] / o[0]:.3f}x, kernel {s[1] / o[1]:.3f}x, total {s[2] / o[2]:.3f}x")
print(f"the shipped log writer thread: {s[3] / o[2] * 100:.1f} % of an access-off request")
# Each shipped run against the access-off run after it, so that a pair meets the same load.
pairs = [float(a[4]) / float(b[4]) for a, b in zip(
    [r for r in rows if r[0] == "shipped"], [r for r in rows if r[0] == "access-off"])]
each = " ".join("%.3f" % p for p in pairs)
print(f"shipped / access-off, total, per pair: {each}; median {statistics.median(pairs):.3f}x")
' "$RESULTS"
