"""A stdio MCP server (standard library only) that misbehaves on purpose, for
tests/it/gateway.rs: what a buggy or hostile upstream does to the gateway.

Tools:
  whoami()     this process's pid
  orphan()     starts `sleep 600` in this process's group (it inherits nothing but the
               group: its stdio is /dev/null) and answers with the sleep's pid
  crash()      the process exits at once (status 3), what it started left running
  too_long(bytes)  a text of that many bytes, the id written after the result (as the
               TypeScript SDK writes an answer)
  chatter(lines, stream)   writes that many short lines to stderr (or, stream "stdout",
               lines that are not JSON-RPC to stdout), then answers "said"

tools/list: the one page of the tools above, or with $SCRIPTED_LIST:
  same_cursor  every page has the tools above and nextCursor "again", forever
  new_cursor   every page has the tools above, a description of $SCRIPTED_PAGE_BYTES
               bytes, and a new nextCursor, forever
  own          the tools above and one of this process's own, own_<pid>
Each tools/list is recorded in $SCRIPTED_EVENTS ("listed tools"), when set, and each
initialize's capabilities ("capabilities {...}", compact JSON). initialize is answered with
the version asked, or $SCRIPTED_VERSION when set. While the file
$SCRIPTED_STALL_LIST exists, a tools/list is never answered.
"""

import json
import os
import subprocess
import sys

EVENTS = os.environ.get("SCRIPTED_EVENTS")
LIST = os.environ.get("SCRIPTED_LIST", "")
TOOLS = [
    {"name": name, "inputSchema": {"type": "object"}}
    for name in ("whoami", "orphan", "crash", "too_long", "chatter")
]


def record(line):
    if EVENTS:
        with open(EVENTS, "a") as f:
            f.write(line + "\n")


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tools_page(params):
    record("listed tools")
    if LIST == "same_cursor":
        return {"tools": TOOLS, "nextCursor": "again"}
    if LIST == "new_cursor":
        page = int((params or {}).get("cursor") or 0) + 1
        padding = "x" * int(os.environ.get("SCRIPTED_PAGE_BYTES", "1000"))
        tools = [{**tool, "description": padding} for tool in TOOLS]
        return {"tools": tools, "nextCursor": str(page)}
    if LIST == "own":
        return {"tools": TOOLS + [{"name": f"own_{os.getpid()}", "inputSchema": {"type": "object"}}]}
    return {"tools": TOOLS}


def text(value):
    return {"content": [{"type": "text", "text": value}]}


def main():
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, mid = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if mid is None:
            continue
        if method == "initialize":
            record("capabilities " + json.dumps(params.get("capabilities"), separators=(",", ":")))
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": os.environ.get("SCRIPTED_VERSION") or params.get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scripted", "version": "1"},
            }})
        elif method == "tools/list":
            stall = os.environ.get("SCRIPTED_STALL_LIST")
            if stall and os.path.exists(stall):
                record("stalled a listing")
                continue
            send({"jsonrpc": "2.0", "id": mid, "result": tools_page(params)})
        elif method == "tools/call" and params.get("name") == "whoami":
            send({"jsonrpc": "2.0", "id": mid, "result": text(f"pid={os.getpid()}")})
        elif method == "tools/call" and params.get("name") == "orphan":
            sleep = subprocess.Popen(
                ["sleep", "600"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            send({"jsonrpc": "2.0", "id": mid, "result": text(f"pid={sleep.pid}")})
        elif method == "tools/call" and params.get("name") == "crash":
            os._exit(3)
        elif method == "tools/call" and params.get("name") == "chatter":
            count = int(params.get("arguments", {}).get("lines", 0))
            out = sys.stdout if params.get("arguments", {}).get("stream") == "stdout" else sys.stderr
            out.write("".join(f"line {n}\n" for n in range(count)))
            out.flush()
            send({"jsonrpc": "2.0", "id": mid, "result": text("said")})
        elif method == "tools/call" and params.get("name") == "too_long":
            size = int(params.get("arguments", {}).get("bytes", 0))
            sys.stdout.write(json.dumps({"result": text("x" * size), "jsonrpc": "2.0", "id": mid}) + "\n")
            sys.stdout.flush()
        else:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32601, "message": f"Method not found: {method}"}})


main()
