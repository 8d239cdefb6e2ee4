#!/usr/bin/env python3
"""SIGKILL of one node behind the balancer: how long until every session goes on (issue 22).

    redis_sessions_failover.py URL PID_TO_KILL [SESSIONS] [BEFORE_S] [AFTER_S]

SESSIONS sessions (default 30) are begun through the balancer at URL (initialize +
notifications/initialized, each on whichever node it picks); each then sends a `tools/call`
echo (a text unique to the session and call, checked in the answer) every 50 ms on its own
keep-alive connection to the balancer. As many probes send `GET /healthz` on the same
schedule: a request that needs no session, so what they see is the balancer's own failover.
After BEFORE_S seconds (default 2) the script SIGKILLs PID_TO_KILL and goes on for AFTER_S
(default 4).

Per client, its recovery is the time from the kill until the end of the first successful
request it sent after the kill. Printed for sessions and probes: the median and maximum
recovery, failed requests after the kill (a failure is an error status, a wrong answer or a
broken connection; the client reconnects and goes on), the longest gap between two
successful answers, and the session recovery beyond the probes' (the cost of sessions on
top of the balancer's failover). Prints a RESULT_JSON line.
"""
import http.client
import json
import os
import signal
import statistics
import sys
import threading
import time
from urllib.parse import urlparse

VERSION = "2025-11-25"
INTERVAL = 0.05


class Client:
    def __init__(self, url, kind, index):
        u = urlparse(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path
        self.kind, self.index = kind, index
        self.conn = None
        self.session = None
        self.log = []  # (start, end, ok)

    def connect(self):
        if self.conn:
            self.conn.close()
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=5)

    def request(self, method, path, body=None, headers=None):
        if self.conn is None:
            self.connect()
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            r = self.conn.getresponse()
            return r.status, r.getheader("Mcp-Session-Id"), r.read()
        except (OSError, http.client.HTTPException) as e:
            self.connect()
            return None, None, str(e).encode()

    def begin(self):
        init = json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": VERSION, "capabilities": {},
                       "clientInfo": {"name": "failover", "version": "0"}},
        })
        status, sid, body = self.request("POST", self.path, init, {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        assert status == 200 and sid, (status, body[:200])
        self.session = sid
        status, _, body = self.request(
            "POST", self.path, '{"jsonrpc":"2.0","method":"notifications/initialized"}',
            self.headers())
        assert status in (200, 202), (status, body[:200])

    def headers(self):
        return {"Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "Mcp-Session-Id": self.session, "MCP-Protocol-Version": VERSION}

    def once(self, n):
        if self.kind == "probe":
            status, _, _ = self.request("GET", "/healthz")
            return status == 200
        text = f"s{self.index}-c{n}"
        body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"text": text}}})
        status, _, data = self.request("POST", self.path, body, self.headers())
        return status == 200 and f'"{text}"'.encode() in data

    def run(self, stop_at):
        n = 0
        next_at = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= stop_at:
                return
            if now < next_at:
                time.sleep(next_at - now)
            n += 1
            start = time.monotonic()
            ok = self.once(n)
            self.log.append((start, time.monotonic(), ok))
            next_at = start + INTERVAL


def summarize(clients, killed_at):
    recoveries, failures, gaps, never = [], 0, [], 0
    for c in clients:
        after = [e for e in c.log if e[0] >= killed_at]
        failures += sum(1 for e in c.log if e[1] >= killed_at and not e[2])
        first_ok = next((e for e in after if e[2]), None)
        if first_ok is None:
            never += 1
        else:
            recoveries.append(first_ok[1] - killed_at)
        ok_ends = [e[1] for e in c.log if e[2]]
        gaps.append(max((b - a for a, b in zip(ok_ends, ok_ends[1:])), default=0.0))
    return {
        "clients": len(clients),
        "never_recovered": never,
        "recovery_ms_p50": round(statistics.median(recoveries) * 1000, 1) if recoveries else None,
        "recovery_ms_max": round(max(recoveries) * 1000, 1) if recoveries else None,
        "failed_after_kill": failures,
        "longest_gap_ms": round(max(gaps) * 1000, 1),
        "requests": sum(len(c.log) for c in clients),
    }


def main():
    url = sys.argv[1]
    victim = int(sys.argv[2])
    sessions = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    before = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
    after = float(sys.argv[5]) if len(sys.argv) > 5 else 4.0
    clients = [Client(url, "session", i) for i in range(sessions)]
    probes = [Client(url, "probe", i) for i in range(sessions)]
    for c in clients:
        c.begin()
    start = time.monotonic()
    stop_at = start + before + after
    threads = [threading.Thread(target=c.run, args=(stop_at,)) for c in clients + probes]
    for t in threads:
        t.start()
    time.sleep(before)
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    for t in threads:
        t.join()
    s = summarize(clients, killed_at)
    p = summarize(probes, killed_at)
    before_kill = [e for c in clients for e in c.log if e[1] < killed_at]
    s["failed_before_kill"] = sum(1 for e in before_kill if not e[2])
    beyond = None
    if s["recovery_ms_max"] is not None and p["recovery_ms_max"] is not None:
        beyond = round(s["recovery_ms_max"] - p["recovery_ms_max"], 1)
    print(f"{'clients':<9} {'n':>4} {'never':>5} {'rec_p50_ms':>10} {'rec_max_ms':>10} "
          f"{'failed':>6} {'gap_max_ms':>10} {'requests':>8}")
    for name, r in (("sessions", s), ("probes", p)):
        print(f"{name:<9} {r['clients']:>4} {r['never_recovered']:>5} {r['recovery_ms_p50']!s:>10} "
              f"{r['recovery_ms_max']!s:>10} {r['failed_after_kill']:>6} {r['longest_gap_ms']:>10} "
              f"{r['requests']:>8}")
    print(f"session recovery beyond the balancer's (max - max): {beyond} ms; "
          f"session failures before the kill: {s['failed_before_kill']}")
    for c in clients:
        c.request("DELETE", c.path, None, {"Mcp-Session-Id": c.session,
                                           "MCP-Protocol-Version": VERSION})
    print("RESULT_JSON " + json.dumps({"sessions": s, "probes": p, "beyond_ms": beyond}))


if __name__ == "__main__":
    main()
