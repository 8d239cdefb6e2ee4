#!/usr/bin/env python3
"""Medians over several load runs: reads the RESULT_JSON lines of benches/pinned.sh (or
benches/http.sh) output files and prints a Markdown table per workload, with same-run ratios.

    python3 benches/median.py bench-results/run-*.log
"""
import json
import statistics
import sys
from collections import defaultdict


def result_lines(paths):
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.startswith("RESULT_JSON "):
                    yield json.loads(line[len("RESULT_JSON "):])


def main(paths):
    throughput = defaultdict(lambda: defaultdict(list))  # (workload) -> (target, conns) -> [point]
    ratios = defaultdict(lambda: defaultdict(list))      # workload -> (name, conns) -> [ratio]
    sessions = defaultdict(list)
    http = defaultdict(list)                             # (label, dialect, conns) -> [point]
    http_order = []
    http_runs = []                                       # per run: (label, conns) -> point, order
    for result in result_lines(paths):
        if result["mode"] == "http":
            http_runs.append(({(label, p["connections"]): p for label in result["order"]
                               for p in result["targets"][label]["points"]}, result["order"]))
            for label in result["order"]:
                target = result["targets"][label]
                for point in target["points"]:
                    key = (label, target["dialect"], point["connections"])
                    if key not in http:
                        http_order.append(key)
                    http[key].append(point)
            continue
        if result["mode"] != "throughput" and result["mode"] != "sessions":
            continue
        if result["mode"] == "sessions":
            for target, data in result["targets"].items():
                sessions[target].append(data["sessions"])
            continue
        cfg = result["config"]
        workload = f'P={cfg["pipeline"]}, {cfg["payload_bytes"]} B, era {cfg.get("era", "2025-11-25")}'
        for target, data in result["targets"].items():
            for point in data["points"]:
                throughput[workload][(target, point["connections"])].append(point)
        for name, points in result["ratios"].items():
            for point in points:
                ratios[workload][(name, point["connections"])].append(point)

    for workload, points in throughput.items():
        print(f"\n### {workload}\n")
        print("| target | C | runs | req/s (median) | p50 µs | p99 µs | server CPU | lost | mismatched |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (target, conns), runs in sorted(points.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            med = lambda key: statistics.median(r[key] for r in runs)
            lat = lambda key: statistics.median(r["latency_us"][key] for r in runs)
            print(f"| {target} | {conns} | {len(runs)} | {med('requests_per_sec'):,.0f} | {lat('p50'):.0f} "
                  f"| {lat('p99'):.0f} | {med('server_cpu_cores'):.2f} | {sum(r['lost'] for r in runs)} "
                  f"| {sum(r['mismatched'] for r in runs)} |")
        print("\n| ratio (same run) | C | req/s median | p50 median | req/s per server-CPU-second |")
        print("|---|---|---|---|---|")
        for (name, conns), runs in sorted(ratios[workload].items(), key=lambda kv: (kv[0][1], kv[0][0])):
            a, b = name.split("/")
            per_cpu = statistics.median(
                (pa["requests_per_sec"] / max(pa["server_cpu_cores"], 1e-9))
                / (pb["requests_per_sec"] / max(pb["server_cpu_cores"], 1e-9))
                for pa, pb in zip(points[(a, conns)], points[(b, conns)])
            )
            print(f"| {name} | {conns} | {statistics.median(r['requests_per_sec'] for r in runs):.2f} "
                  f"| {statistics.median(r['p50'] for r in runs):.2f} | {per_cpu:.2f} |")

    if http:
        print("\n### Streamable HTTP (one request in flight per connection)\n")
        print("| target | dialect | C | runs | answers | req/s (median) | p50 µs | p99 µs | server CPU "
              "| req per server CPU-s | lost+mism+err |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for key in http_order:
            runs = http[key]
            med = lambda get: statistics.median(get(r) for r in runs)
            per_cpu = [r["requests_per_cpu_second"] for r in runs if r.get("requests_per_cpu_second")]
            bad = sum(r["lost"] + r["mismatched"] + r["errors"] for r in runs)
            formats = "/".join(sorted({r["answer_format"] for r in runs}))
            print(f"| {key[0]} | {key[1]} | {key[2]} | {len(runs)} | {formats} "
                  f"| {med(lambda r: r['requests_per_sec']):,.0f} | {med(lambda r: r['latency_us']['p50']):.0f} "
                  f"| {med(lambda r: r['latency_us']['p99']):.0f} | {med(lambda r: r['server_cpu_cores'] or 0):.2f} "
                  f"| {statistics.median(per_cpu) if per_cpu else float('nan'):,.0f} | {bad} |")

    if http_runs:
        print("\n| ratio (same run, first target / other) | C | runs | req/s median | req per server CPU-s median | p50 median |")
        print("|---|---|---|---|---|---|")
        pairs = defaultdict(list)
        for points, order in http_runs:
            for (label, conns), point in points.items():
                first = points.get((order[0], conns))
                if label != order[0] and first:
                    pairs[(f"{order[0]}/{label}", conns)].append((first, point))
        for (name, conns), runs in pairs.items():
            rps = [a["requests_per_sec"] / b["requests_per_sec"] for a, b in runs if b["requests_per_sec"]]
            cpu = [a["requests_per_cpu_second"] / b["requests_per_cpu_second"] for a, b in runs
                   if a.get("requests_per_cpu_second") and b.get("requests_per_cpu_second")]
            p50 = [a["latency_us"]["p50"] / b["latency_us"]["p50"] for a, b in runs if b["latency_us"]["p50"]]
            fmt = lambda xs: f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"
            print(f"| {name} | {conns} | {len(runs)} | {fmt(rps)} | {fmt(cpu)} | {fmt(p50)} |")

    if sessions:
        print("\n### Idle sessions\n")
        print("| target | runs | opened (min) | KiB/session (median) | ping p50 µs | ping p99 µs | dropped |")
        print("|---|---|---|---|---|---|---|")
        for target, runs in sessions.items():
            kib = [r["bytes_per_session"] / 1024 for r in runs if r.get("bytes_per_session")]
            ping = lambda key: statistics.median(r["ping"]["latency_us"][key] for r in runs)
            print(f"| {target} | {len(runs)} | {min(r['opened'] for r in runs)} "
                  f"| {statistics.median(kib):.1f} | {ping('p50'):.0f} | {ping('p99'):.0f} "
                  f"| {sum(r['dropped_during_hold'] for r in runs)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
