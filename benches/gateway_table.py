#!/usr/bin/env python3
"""The table of benches/gateway.sh from its results.jsonl (one GATEWAY_JSON object a line).

Latency and CPU figures are medians over the rounds; "added" is, per round, the gateway's
figure minus the direct call's of the same round, then the median of those.
"""
import json
import statistics
import sys

NAMES = {
    "local-ws": ("mcp-ws, its own echo (no gateway)", "WebSocket", "none"),
    "mcp-ws-ws": ("mcp-ws", "WebSocket", "per_session"),
    "mcp-ws-http": ("mcp-ws", "HTTP", "per_session"),
    "mcp-ws-shared-ws": ("mcp-ws --mode shared", "WebSocket", "shared"),
    "mcp-ws-shared-http": ("mcp-ws --mode shared", "HTTP", "shared"),
    "sg-ws": ("supergateway 4.0.0", "WebSocket", "shared (one child)"),
    "sg-http": ("supergateway 4.0.0 --stateful", "HTTP", "per session"),
    "mcp-proxy-http": ("mcp-proxy 0.13.0", "HTTP", "shared (one child)"),
}

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
max_sessions = sys.argv[2] if len(sys.argv) > 2 else "100"


def pick(label, mode):
    return [r for r in rows if r["label"] == label and r["mode"] == mode and "fatal" not in r]


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    if v is None:
        return "–"
    return f"{v:.{digits}f}"


direct = {r["round"]: r for r in pick("direct", "direct")}
print()
if direct:
    print(f"direct (the generator speaking JSON-RPC lines to the child's stdin): "
          f"p50 {fmt(med(r['p50_us'] for r in direct.values()))} µs, "
          f"p99 {fmt(med(r['p99_us'] for r in direct.values()))} µs "
          f"(median of {len(direct)} rounds)")
print()
print("| gateway | transport | children | CPU µs/call, 1 session | CPU µs/call, 10 sessions "
      "| p50 µs | p99 µs | added p50 µs | added p99 µs | RSS MiB/session @10 | @" + max_sessions +
      " | processes @10 | @" + max_sessions + " | sessions without error | errors / cross-talk / lost "
      "| spawn-to-ready ms | first calls in the ramp, p50 ms | switches/call, 1 session |")
print("|" + "---|" * 18)
summary = {}
for label, (gateway, transport, children) in NAMES.items():
    lat = pick(label, "latency")
    cpu = pick(label, "cpu")
    ses = pick(label, "sessions")
    fatal = [r["fatal"] for r in rows if r["label"] == label and "fatal" in r]
    if not (lat or cpu or ses or fatal):
        continue
    added50 = med(r["p50_us"] - direct[r["round"]]["p50_us"] for r in lat if r["round"] in direct)
    added99 = med(r["p99_us"] - direct[r["round"]]["p99_us"] for r in lat if r["round"] in direct)
    cpu1 = med(r.get("cpu_us_per_call") for r in lat)
    cpu10 = med(r.get("cpu_us_per_call") for r in cpu)
    summary[label] = (cpu1, cpu10, added50)
    s = ses[0] if ses else {}
    at = s.get("at", {})

    def mib(n):
        v = at.get(n, {}).get("rss_kib_per_session")
        return None if v is None else v / 1024

    def procs(n):
        return at.get(n, {}).get("processes")

    ready = med((r["open_us"] + r["first_call_us"]) / 1000 for r in lat if "open_us" in r)
    ok = s.get("ok_up_to")
    ok_text = "–" if not s else (f"{ok}" + ("" if ok == int(max_sessions) else f" ({s.get('first_failure')})"))
    print(f"| {gateway} | {transport} | {children} | {fmt(cpu1)} | {fmt(cpu10)} "
          f"| {fmt(med(r['p50_us'] for r in lat))} | {fmt(med(r['p99_us'] for r in lat))} "
          f"| {fmt(added50)} | {fmt(added99)} | {fmt(mib('10'), 1)} | {fmt(mib(max_sessions), 1)} "
          f"| {fmt(procs('10'))} | {fmt(procs(max_sessions))} | {ok_text} "
          f"| {s.get('errors', '–')} / {s.get('cross_talk', '–')} / {s.get('lost', '–')} "
          f"| {fmt(ready, 1)} | {fmt(s['first_call_p50_us'] / 1000, 1) if s else '–'} "
          f"| {fmt(med(r.get('switches_per_call') for r in lat), 1)} |")
    for f in fatal:
        print(f"|  | {label}: failed: {f[:200]} |")

print()
for ours, theirs in (("mcp-ws-ws", "sg-ws"), ("mcp-ws-http", "sg-http"), ("mcp-ws-shared-ws", "sg-ws"),
                     ("mcp-ws-http", "mcp-proxy-http"), ("mcp-ws-shared-http", "mcp-proxy-http")):
    if ours in summary and theirs in summary:
        a, b = summary[ours], summary[theirs]
        parts = []
        for what, i in (("1 session", 0), ("10 sessions", 1)):
            if a[i] and b[i]:
                parts.append(f"{what} {a[i] / b[i]:.3f}× ({a[i]:.0f} / {b[i]:.0f} µs)")
        print(f"CPU per call, {ours} / {theirs}: " + ", ".join(parts))
