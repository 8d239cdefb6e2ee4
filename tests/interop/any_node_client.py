"""Many sessions through a balancer: the official Python MCP SDK (mcp 1.30.0) over Streamable
HTTP, each session doing initialize, tools/list, a resource subscription, CALLS `echo` calls
whose text is unique to the session and the call (an answer with anyone else's text is
cross-talk), and DELETE at the end. Run by tests/it/three_nodes.rs against three mcp-ws nodes
behind nginx (config/nginx-three-nodes.conf: round-robin, no affinity).

A call that fails because its node died (the connection broke, 502) is retried, at most 3
times, on the same session, with the same idempotency key: the session must go on on the
other nodes. Everything else counts as a failure.

Usage: python any_node_client.py URL SESSIONS CALLS
Prints "ready N" once N sessions are initialized (every 10), then one JSON summary line.
"""

import json
import sys
from datetime import timedelta

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

results = {"sessions_ok": 0, "calls_ok": 0, "retried": 0, "crosstalk": 0, "failures": []}
ready = 0


async def call(session: ClientSession, text: str, key: str) -> str:
    request = types.ClientRequest(types.CallToolRequest(
        method="tools/call",
        params=types.CallToolRequestParams(
            name="echo", arguments={"text": text}, _meta={"idempotencyKey": key})))
    result = await session.send_request(request, types.CallToolResult)
    return result.content[0].text


async def one_session(url: str, index: int, calls: int) -> None:
    global ready
    try:
        async with streamable_http_client(url) as (read, write, _):
            async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=20)) as s:
                await s.initialize()
                ready += 1
                if ready % 10 == 0:
                    print(f"ready {ready}", flush=True)
                tools = (await s.list_tools()).tools
                assert any(t.name == "echo" for t in tools), [t.name for t in tools]
                await s.subscribe_resource("mcp-ws://demo/readme")
                for k in range(calls):
                    text = f"session {index} call {k}"
                    for attempt in range(4):
                        try:
                            answer = await call(s, text, f"s{index}-c{k}")
                            break
                        except Exception:
                            if attempt == 3:
                                raise
                            results["retried"] += 1
                            await anyio.sleep(0.2)
                    if answer != text:
                        results["crosstalk"] += 1
                        raise AssertionError(f"asked {text!r}, answered {answer!r}")
                    results["calls_ok"] += 1
                    await anyio.sleep(0.02)
        results["sessions_ok"] += 1
    except BaseException as e:  # noqa: BLE001 - every failure is reported
        results["failures"].append(f"session {index}: {type(e).__name__}: {e}"[:300])


async def main() -> None:
    url, sessions, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    async with anyio.create_task_group() as group:
        for index in range(sessions):
            group.start_soon(one_session, url, index, calls)
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    anyio.run(main)
