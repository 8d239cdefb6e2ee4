"""Many sessions through a balancer: the official Python MCP SDK (mcp 1.30.0) over Streamable
HTTP, each session doing initialize, tools/list, a resource subscription, CALLS `echo` calls
whose text is unique to the session and the call (an answer with anyone else's text is
cross-talk), and DELETE at the end. Run by tests/it/three_nodes.rs against three mcp-ws nodes
behind nginx (config/nginx-three-nodes.conf: round-robin, no affinity).

Every call carries an idempotency key unique to the session and the call. A step that fails
is retried with a growing pause, for up to RETRY_FOR seconds, and the reason is counted
(`retry_reasons`: "-32008" and "-32031" are the server's clear, retryable refusals;
"timeout" is a request left unanswered; "sessionEnded" a session the SDK ended after an
HTTP error; "disconnected" a broken connection; anything else by its type). Every HTTP
error answer is counted by status (`http_errors`: "503" is the server's clear refusal while
Redis is away, "502" nginx's word for a node that died). A failure inside the session (an error answer, a
timeout) is retried on the same session with the same key. The SDK ends the whole session
on any non-2xx answer to a POST (a 503 while Redis is away, say); then a new session is
begun and the walk goes on at the step that failed, with the same keys (with MCP_TOKEN set,
keys are scoped to the client's identity, so a key used in the ended session still holds
in the new one); these are counted in `restarts`. A step still failing after RETRY_FOR is a
failure.

Mode `elicit` (nodes serving the conformance set): each session calls `test_elicitation`
CALLS times instead of `echo`; the SDK answers the server's elicitation/create with a name
unique to the session and the call, POSTed through the balancer (so usually to another node
than the one running the tool), and the tool's result must carry that name.

Usage: [MCP_TOKEN=bearer-token] python any_node_client.py URL SESSIONS CALLS [echo|elicit]
Prints "ready N" once N sessions are initialized (every 10), then one JSON summary line.
"""

import json
import os
import sys
import time
from collections import Counter
from datetime import timedelta

import anyio
import httpx
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import McpError

RETRY_FOR = 30.0
# Longer than any answer takes on a loaded machine: a request past it was left unanswered.
READ_TIMEOUT = 15
results = {"sessions_ok": 0, "calls_ok": 0, "retried": 0, "restarts": 0, "crosstalk": 0,
           "failures": []}
reasons: Counter = Counter()
# The HTTP errors the server (or nginx) answered, by status: the SDK hides them behind an
# ended session.
http_errors: Counter = Counter()
ready = 0


def leaf(e: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def reason(e: BaseException) -> str:
    e = leaf(e)
    if isinstance(e, httpx.HTTPStatusError):
        return str(e.response.status_code)
    if isinstance(e, McpError):
        code = e.error.code
        if code == httpx.codes.REQUEST_TIMEOUT:
            return "timeout"
        return str(code)
    if isinstance(e, (anyio.ClosedResourceError, anyio.BrokenResourceError)):
        return "sessionEnded"
    if isinstance(e, (httpx.TransportError, anyio.EndOfStream)):
        return "disconnected"
    return type(e).__name__


def session_ended(e: BaseException) -> bool:
    """Whether the SDK ended the session (after an HTTP error): retried in a new one."""
    return isinstance(leaf(e), (anyio.ClosedResourceError, anyio.BrokenResourceError))


async def retrying(what: str, step):
    """Runs `step` (`what`, for the counts) until it succeeds or RETRY_FOR seconds have
    passed (then re-raises); a step of a session the SDK ended is not retried here."""
    deadline = time.monotonic() + RETRY_FOR
    pause = 0.1
    while True:
        try:
            return await step()
        except Exception as e:
            if session_ended(e) or time.monotonic() + pause > deadline:
                raise
            results["retried"] += 1
            why = reason(e)
            reasons[f"{why} ({what})" if why == "timeout" else why] += 1
            await anyio.sleep(pause)
            pause = min(pause * 2, 1.0)


async def call(session: ClientSession, name: str, arguments: dict, key: str) -> str:
    request = types.ClientRequest(types.CallToolRequest(
        method="tools/call",
        params=types.CallToolRequestParams(
            name=name, arguments=arguments, _meta={"idempotencyKey": key})))
    result = await session.send_request(request, types.CallToolResult)
    if result.isError:
        raise RuntimeError(f"tool error: {result.content[0].text}")
    return result.content[0].text


async def count_errors(response: httpx.Response) -> None:
    if response.status_code >= 400:
        http_errors[str(response.status_code)] += 1


def http_client() -> httpx.AsyncClient:
    token = os.environ.get("MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else None
    client = create_mcp_http_client(headers=headers)
    client.event_hooks["response"].append(count_errors)
    return client


async def run_session(url: str, index: int, calls: int, mode: str, walk: dict) -> None:
    """The walk from where `walk` says it is; `walk` keeps the progress across sessions."""
    global ready
    # The name the client gives the elicitation of its current call.
    current = {"name": None}

    async def on_elicit(context, params: types.ElicitRequestParams):
        return types.ElicitResult(
            action="accept", content={"username": current["name"], "email": "x@example.com"})

    async with http_client() as client, streamable_http_client(url, http_client=client) as (
            read, write, _):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=READ_TIMEOUT),
                                 elicitation_callback=on_elicit) as s:
            await s.initialize()
            if not walk["began"]:
                walk["began"] = True
                ready += 1
                if ready % 10 == 0:
                    print(f"ready {ready}", flush=True)
            if not walk["listed"]:
                tools = (await retrying("tools/list", s.list_tools)).tools
                wanted = "echo" if mode == "echo" else "test_elicitation"
                assert any(t.name == wanted for t in tools), [t.name for t in tools]
                if mode == "echo":
                    await retrying("resources/subscribe",
                                   lambda: s.subscribe_resource("mcp-ws://demo/readme"))
                walk["listed"] = True
            while walk["next"] < calls:
                k = walk["next"]
                text = f"session {index} call {k}"
                key = f"s{index}-c{k}"
                if mode == "echo":
                    answer = await retrying("echo", lambda: call(s, "echo", {"text": text}, key))
                    good = answer == text
                else:
                    current["name"] = text
                    answer = await retrying("test_elicitation", lambda: call(
                        s, "test_elicitation", {"message": f"name for {key}?"}, key))
                    good = f'"username":"{text}"' in answer
                if not good:
                    results["crosstalk"] += 1
                    raise AssertionError(f"asked {text!r}, answered {answer!r}")
                results["calls_ok"] += 1
                walk["next"] += 1
                await anyio.sleep(0.02)


async def one_session(url: str, index: int, calls: int, mode: str) -> None:
    walk = {"began": False, "listed": False, "next": 0}
    deadline = time.monotonic() + RETRY_FOR
    try:
        while True:
            try:
                await run_session(url, index, calls, mode, walk)
                break
            except AssertionError:
                raise
            except Exception as e:
                if time.monotonic() > deadline:
                    raise
                results["restarts"] += 1
                reasons[reason(e)] += 1
                deadline = time.monotonic() + RETRY_FOR
                await anyio.sleep(0.5)
        results["sessions_ok"] += 1
    except BaseException as e:  # noqa: BLE001 - every failure is reported
        e = leaf(e)
        results["failures"].append(f"session {index}: {type(e).__name__}: {e}"[:300])


async def main() -> None:
    url, sessions, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "echo"
    async with anyio.create_task_group() as group:
        for index in range(sessions):
            group.start_soon(one_session, url, index, calls, mode)
    results["retry_reasons"] = dict(reasons)
    results["http_errors"] = dict(http_errors)
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    anyio.run(main)
