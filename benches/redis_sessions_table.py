#!/usr/bin/env python3
"""Tables of benches/redis-sessions.sh from the logs in its OUT directory.

    python3 benches/redis_sessions_table.py OUT           (part 1: local / redis-a / redis-ab)
    python3 benches/redis_sessions_table.py OUT nginx     (part 3: three nodes behind nginx)

Per round, each target's point (its RESULT_JSON line) and the Redis commands the nodes sent
during it (the REDIS line); ratios are taken within a round, then the median over rounds.
"""
import glob
import json
import os
import re
import statistics
import sys


def read(path):
    result, redis, nginx = None, {}, None
    for line in open(path):
        if line.startswith("RESULT_JSON "):
            result = json.loads(line[len("RESULT_JSON "):])
        elif line.startswith("REDIS "):
            for kv in line.split()[1:]:
                if "=" in kv:
                    k, v = kv.split("=")
                    redis[k] = int(v)
        elif line.startswith("NGINX_TICKS "):
            nginx = int(line.split()[1])
    label = result["order"][0]
    point = result["targets"][label]["points"][0]
    return point, redis, nginx


def rounds(out, prefix):
    found = {}
    for path in glob.glob(os.path.join(out, f"{prefix}*-*.log")):
        m = re.match(rf"{prefix}(\d+)-(.+)\.log$", os.path.basename(path))
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = read(path)
    return [found[k] for k in sorted(found)]


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def spread(values, digits=3):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def per_request(redis, point):
    # Every request the generator sent (warm-up and drain included) against every command
    # the nodes sent meanwhile (the sessions' set-up and end included: 5 commands a session).
    return sum(redis.values()) / point["answered"] if point["answered"] else None


def part1(out):
    runs = rounds(out, "r")
    labels = ["local", "redis-a", "local-ab", "redis-ab"]
    print(f"## Session `tools/call` over HTTP, sessions in Redis against local ({len(runs)} rounds)\n")
    print("| target | req/s | server CPU (cores) | req per server CPU-s | µs CPU per request "
          "| p50 µs | p99 µs | Redis commands per request | commands (all rounds) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label in labels:
        pts = [r[label] for r in runs if label in r]
        if not pts:
            continue
        rps = med([p["requests_per_sec"] for p, _, _ in pts])
        cpu = med([p["server_cpu_cores"] for p, _, _ in pts])
        rpc = med([p["requests_per_cpu_second"] for p, _, _ in pts])
        p50 = med([p["latency_us"]["p50"] for p, _, _ in pts])
        p99 = med([p["latency_us"]["p99"] for p, _, _ in pts])
        rr = med([per_request(r, p) for p, r, _ in pts])
        total = {}
        for _, r, _ in pts:
            for k, v in r.items():
                total[k] = total.get(k, 0) + v
        print(f"| {label} | {fmt(rps)} | {fmt(cpu, 2)} | {fmt(rpc)} | "
              f"{fmt(1e6 / rpc if rpc else None, 1)} | {fmt(p50)} | {fmt(p99)} | {fmt(rr, 4)} | "
              f"{' '.join(f'{k}={v}' for k, v in sorted(total.items())) or 'none'} |")
    print()
    print("Same-round ratios (median, min–max):\n")
    print("| target ÷ control | req per CPU-s | p50 added (µs) |")
    print("|---|---|---|")
    for label, control in (("redis-a", "local"), ("redis-ab", "local-ab"), ("redis-ab", "local")):
        ratios, added = [], []
        for r in runs:
            if label in r and control in r:
                a, l = r[label][0], r[control][0]
                if a["requests_per_cpu_second"] and l["requests_per_cpu_second"]:
                    ratios.append(a["requests_per_cpu_second"] / l["requests_per_cpu_second"])
                added.append(a["latency_us"]["p50"] - l["latency_us"]["p50"])
        print(f"| {label} ÷ {control} | {spread(ratios)} | {spread(added, 0)} |")
    bad = [(i + 1, label) for i, r in enumerate(runs) for label, (p, _, _) in r.items()
           if p["errors"] or p["lost"] or p["mismatched"] or p["connect_failures"]]
    print(f"\nErrors, lost, mismatched or failed connections: {bad or 'none'}\n")


def part3(out):
    runs = rounds(out, "n")
    print(f"## Three nodes behind nginx, round-robin ({len(runs)} rounds)\n")
    print("| workload | per s | p50 µs | p99 µs | nodes' CPU (cores) | per node CPU-s "
          "| nginx CPU (cores) | Redis commands per unit | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, unit in (("sessions", "session"), ("requests", "request")):
        pts = [r[label] for r in runs if label in r]
        if not pts:
            continue
        errors = sum(p["errors"] + p["lost"] + p["mismatched"] for p, _, _ in pts)
        nginx = med([n / 100 / p["window_s"] if n is not None else None for p, _, n in pts])
        print(f"| {label} ({unit}s) | {fmt(med([p['requests_per_sec'] for p, _, _ in pts]))} | "
              f"{fmt(med([p['latency_us']['p50'] for p, _, _ in pts]))} | "
              f"{fmt(med([p['latency_us']['p99'] for p, _, _ in pts]))} | "
              f"{fmt(med([p['server_cpu_cores'] for p, _, _ in pts]), 2)} | "
              f"{fmt(med([p['requests_per_cpu_second'] for p, _, _ in pts]))} | {fmt(nginx, 2)} | "
              f"{fmt(med([per_request(r, p) for p, r, _ in pts]), 3)} | {errors} |")
    print()


def first(out):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "first-*.log"))):
        for line in open(path):
            if line.startswith("RESULT_JSON "):
                runs.append(json.loads(line[len("RESULT_JSON "):]))
    print(f"## The first request of a session on a node that did not begin it ({len(runs)} rounds)\n")
    print("| pass | p50 µs | server CPU µs per request | Redis commands per request |")
    print("|---|---|---|---|")
    for name in ("take-up", "held", "origin"):
        passes = [r["passes"][name] for r in runs if name in r["passes"]]
        print(f"| {name} | {fmt(med([p['p50_us'] for p in passes]))} | "
              f"{fmt(med([p['server_cpu_us_per_request'] for p in passes]), 1)} | "
              f"{fmt(med([p['redis_per_request'] for p in passes]), 2)} |")
    print()
    print(f"Take-up minus held, per round: p50 {spread([r['take_up_added']['p50_us'] for r in runs], 0)} µs, "
          f"server CPU {spread([r['take_up_added']['cpu_us'] for r in runs], 1)} µs\n")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "first":
        first(sys.argv[1])
    elif len(sys.argv) > 2 and sys.argv[2] == "nginx":
        part3(sys.argv[1])
    else:
        part1(sys.argv[1])
