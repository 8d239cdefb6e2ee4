#!/usr/bin/env python3
"""The first request of a session on a node that did not begin it (issue 22).

    redis_sessions_first.py URL_A URL_B PID_B REDIS_PORT [SESSIONS [PID_A]]

Begins SESSIONS sessions on node A (initialize + notifications/initialized), then sends
each session's `tools/call` echo to node B twice, in three passes over all sessions:

  take-up   B's first request of each session (B reads the record from Redis: GETEX)
  held      B's second request of each session (B holds it)
  origin    a request on A, which began every session (reference)

Per pass: p50 / p90 latency as this client sees it (one keep-alive connection per node,
one request at a time: the client's own cost is the same in every pass, so differences
between passes are the server's), node B's CPU per request from /proc/PID/task/*/schedstat
(nanoseconds on CPU, all of B's threads; node A's for the origin pass), and Redis commands
per request from `INFO commandstats` before and after the pass. Sessions are ended (DELETE
on A) at the end. Prints a table and a RESULT_JSON line.
"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from urllib.parse import urlparse

VERSION = "2025-11-25"


def conn_for(url):
    u = urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.connect()
    return c, u.path


def post(conn, path, body, session=None):
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if session:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = VERSION
    conn.request("POST", path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, r.getheader("Mcp-Session-Id"), data


def cpu_ns(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def commandstats(port):
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "info", "commandstats"],
        capture_output=True, text=True, check=True,
    ).stdout
    calls = {}
    for line in out.splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            fields = dict(kv.split("=") for kv in rest.split(","))
            calls[name] = int(fields["calls"])
    return calls


def redis_delta(before, after):
    """Commands the nodes sent (redis-cli's own INFO left out)."""
    delta = {}
    for name, calls in after.items():
        d = calls - before.get(name, 0)
        if d and name != "info":
            delta[name] = d
    return delta


def call_body(i, text):
    return json.dumps({
        "jsonrpc": "2.0", "id": i, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    })


def main():
    url_a, url_b, pid_b, redis_port = sys.argv[1:5]
    pid_a = int(sys.argv[6]) if len(sys.argv) > 6 else None
    sessions = int(sys.argv[5]) if len(sys.argv) > 5 else 500
    pid_b = int(pid_b)
    a, path_a = conn_for(url_a)
    b, path_b = conn_for(url_b)
    ids = []
    for i in range(sessions):
        init = json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": VERSION, "capabilities": {},
                       "clientInfo": {"name": "first-request", "version": "0"}},
        })
        status, sid, _ = post(a, path_a, init)
        assert status == 200 and sid, (status, sid)
        status, _, _ = post(a, path_a, '{"jsonrpc":"2.0","method":"notifications/initialized"}', sid)
        assert status in (200, 202), status
        ids.append(sid)
    time.sleep(0.5)  # the nodes' notes about the new sessions are delivered

    text = "x" * 64
    passes = [("take-up", b, path_b, pid_b), ("held", b, path_b, pid_b)]
    if pid_a:
        passes.append(("origin", a, path_a, pid_a))
    results = {}
    for name, conn, path, pid in passes:
        lat = []
        r0 = commandstats(redis_port)
        c0 = cpu_ns(pid)
        for n, sid in enumerate(ids):
            t0 = time.perf_counter_ns()
            status, _, data = post(conn, path, call_body(n + 1, text), sid)
            t1 = time.perf_counter_ns()
            assert status == 200 and text.encode() in data, (name, status, data[:200])
            lat.append((t1 - t0) / 1000)
        c1 = cpu_ns(pid)
        time.sleep(0.2)  # store writes spawned by the pass land in the count
        r1 = commandstats(redis_port)
        lat.sort()
        delta = redis_delta(r0, r1)
        results[name] = {
            "requests": len(ids),
            "p50_us": round(statistics.median(lat), 1),
            "p90_us": round(lat[int(len(lat) * 0.9)], 1),
            "server_cpu_us_per_request": round((c1 - c0) / 1000 / len(ids), 1),
            "redis_commands": delta,
            "redis_per_request": round(sum(delta.values()) / len(ids), 3),
        }
    for sid in ids:
        a.request("DELETE", path_a, headers={"Mcp-Session-Id": sid, "MCP-Protocol-Version": VERSION})
        a.getresponse().read()

    print(f"{'pass':<8} {'requests':>8} {'p50_us':>8} {'p90_us':>8} {'cpu_us/req':>10} {'redis/req':>9}  commands")
    for name, r in results.items():
        print(f"{name:<8} {r['requests']:>8} {r['p50_us']:>8} {r['p90_us']:>8} "
              f"{r['server_cpu_us_per_request']:>10} {r['redis_per_request']:>9}  {r['redis_commands']}")
    added = {
        "p50_us": round(results["take-up"]["p50_us"] - results["held"]["p50_us"], 1),
        "cpu_us": round(results["take-up"]["server_cpu_us_per_request"]
                        - results["held"]["server_cpu_us_per_request"], 1),
    }
    print(f"first request on another node, added: p50 {added['p50_us']} us, "
          f"server CPU {added['cpu_us']} us")
    print("RESULT_JSON " + json.dumps({"passes": results, "take_up_added": added}))


if __name__ == "__main__":
    main()
