"""A stdio MCP server (standard library only) whose one tool floods its client with requests.

`flood {count}` writes `count` ping requests to stdout without reading stdin, and notes
after how many its stdout stopped taking them for 2 s (null if it never did). Then it reads
the answers, still writing what was left, and returns as JSON text: `count`, `held_back_after`,
`answered` (distinct ids answered with a result), `answered_twice`, `errors`.

tests/it/gateway.rs uses it to check that the gateway's client holds such a child back by
its own stdout pipe (reading no more of it while its answers cannot be written) and still
answers every request exactly once when the child reads again.
"""

import json
import os
import select
import sys
import time

STDIN, STDOUT = 0, 1
pending = b""


def read_lines(timeout):
    """The complete lines stdin brought within `timeout` seconds ([] if none)."""
    global pending
    ready, _, _ = select.select([STDIN], [], [], timeout)
    if not ready:
        return []
    chunk = os.read(STDIN, 1 << 16)
    if not chunk:
        sys.exit(0)
    pending += chunk
    *lines, pending = pending.split(b"\n")
    return [json.loads(line) for line in lines if line.strip()]


def send(message):
    data = (json.dumps(message) + "\n").encode()
    while data:
        select.select([], [STDOUT], [])
        try:
            data = data[os.write(STDOUT, data):]
        except BlockingIOError:
            pass


def flood(count):
    lines = [
        (json.dumps({"jsonrpc": "2.0", "id": f"flood-{i}", "method": "ping"}) + "\n").encode()
        for i in range(count)
    ]
    data = b"".join(lines)
    ends, total = [], 0
    for line in lines:
        total += len(line)
        ends.append(total)
    written, held_back_after = 0, None
    # Phase 1: write without reading, until done or held back for 2 s.
    while written < len(data):
        try:
            written += os.write(STDOUT, data[written:])
        except BlockingIOError:
            _, ready, _ = select.select([], [STDOUT], [], 2.0)
            if not ready:
                held_back_after = sum(1 for end in ends if end <= written)
                break
    # Phase 2: read the answers, writing the rest as the pipe takes it.
    answers, twice, errors = set(), 0, 0
    deadline = time.monotonic() + 120
    while len(answers) + errors < count and time.monotonic() < deadline:
        if written < len(data):
            _, ready, _ = select.select([], [STDOUT], [], 0)
            if ready:
                try:
                    written += os.write(STDOUT, data[written:])
                except BlockingIOError:
                    pass
        for message in read_lines(0.01):
            ident = message.get("id")
            if not (isinstance(ident, str) and ident.startswith("flood-")):
                continue
            if "error" in message:
                errors += 1
            elif ident in answers:
                twice += 1
            else:
                answers.add(ident)
    return {
        "count": count,
        "held_back_after": held_back_after,
        "answered": len(answers),
        "answered_twice": twice,
        "errors": errors,
    }


def answer(message):
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return
    params = message.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "flooding-child", "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {
            "tools": [
                {
                    "name": "flood",
                    "description": "Sends `count` pings to the client without reading its answers.",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"count": {"type": "integer"}},
                        "required": ["count"],
                    },
                }
            ]
        }
    elif method == "tools/call" and params.get("name") == "flood":
        report = flood(int(params["arguments"]["count"]))
        result = {"content": [{"type": "text", "text": json.dumps(report)}]}
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "Method not found"}})
        return
    send({"jsonrpc": "2.0", "id": ident, "result": result})


os.set_blocking(STDOUT, False)
while True:
    for message in read_lines(None):
        answer(message)
