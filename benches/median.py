#!/usr/bin/env python3
"""Medians over several load runs: reads the RESULT_JSON lines of benches/pinned.sh output
files and prints a Markdown table per workload, with same-run ratios.

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
    for result in result_lines(paths):
        if result["mode"] == "sessions":
            for target, data in result["targets"].items():
                sessions[target].append(data["sessions"])
            continue
        cfg = result["config"]
        workload = f'P={cfg["pipeline"]}, {cfg["payload_bytes"]} B'
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
