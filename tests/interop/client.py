"""Interop client: drives an mcp-ws server with the official Python MCP SDK
(mcp[ws] 1.30.0: a ClientSession over mcp.client.websocket.websocket_client, or over
mcp.client.streamable_http.streamable_http_client, a 2025-11-25 session).

Usage: python client.py [--transport ws|http] URL
  python client.py --transport ws ws://127.0.0.1:PORT/mcp     (the default)
  python client.py --transport http http://127.0.0.1:PORT/mcp

Over HTTP the same checks run, plus two of the transport's own: the GET stream (which
carries the list changes and resource updates, the client being idle) opens, and DELETE
ends the session (its id is then unknown).

Prints one line per check ("ok <name>" or "FAIL <name>: <reason>"), then a final
line "N passed, M failed". Exits 0 only if nothing failed.

Some checks need the server's owner to change something while this client is
connected: the client prints "@registry <action>" and tests/it/support/interop.rs
makes the change (see there), then the client waits for the notifications the
change must cause. The check names and the fixtures (ask_* tools, the watched
resources, what "@registry add" adds) are the ones of harness.rs, and the same
as in client.mjs.
"""

import json
import logging
import sys
import warnings
from contextlib import AsyncExitStack
from datetime import timedelta

import anyio
import httpx
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import McpError

# websocket_client is deprecated in favour of streamable HTTP ("WebSocket was never part of
# the spec"); it is still the SDK's WebSocket client, which is what this checks.
warnings.simplefilter("ignore", DeprecationWarning)
from mcp.client.websocket import websocket_client  # noqa: E402

OVERALL_TIMEOUT_S = 30
REQUEST_TIMEOUT = timedelta(seconds=10)
# How long to wait for a notification the server must send.
NOTIFICATION_TIMEOUT_S = 10


class ClientErrors(logging.Handler):
    """The SDK logs what it could not handle (a message that fails validation, an answer to
    no request) as warnings and errors: each is a protocol error the server provoked."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"[client error] {record.levelname} {record.name}: {record.getMessage()}",
              file=sys.stderr, flush=True)


logging.basicConfig(level=logging.WARNING, handlers=[ClientErrors()])

passed = 0
failed = 0


def out(line: str) -> None:
    print(line, flush=True)


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def describe(e: BaseException) -> str:
    if isinstance(e, McpError):
        return one_line(f"McpError code={e.error.code}: {e.error.message}")
    return one_line(f"{type(e).__name__}: {e}")


async def check(name: str, fn) -> bool:
    global passed, failed
    try:
        await fn()
    except Exception as e:  # a failed check, whatever it raised
        failed += 1
        out(f"FAIL {name}: {describe(e)}")
        return False
    passed += 1
    out(f"ok {name}")
    return True


async def expect_rpc_error(call, code: int) -> None:
    try:
        result = await call
    except McpError as e:
        assert e.error.code == code, f"expected error code {code}, got {e.error.code} ({e.error.message})"
        return
    raise AssertionError(f"expected JSON-RPC error {code}, but the request resolved with {result!r}"[:300])


def first_text(result: types.CallToolResult) -> str:
    assert result.content, f"no content: {result!r}"
    content = result.content[0]
    assert isinstance(content, types.TextContent), f"content[0] is not text: {content!r}"
    return content.text


class Notifications:
    """What the server sent on its own (list changes, resource updates), in arrival order.
    Each waiter takes the oldest entry of its kind not taken yet."""

    def __init__(self) -> None:
        self.entries: list[dict] = []
        self.arrived = anyio.Event()

    def push(self, kind: str, value: object = None) -> None:
        self.entries.append({"kind": kind, "value": value, "taken": False})
        self.arrived.set()
        self.arrived = anyio.Event()

    async def next(self, kind: str) -> object:
        try:
            with anyio.fail_after(NOTIFICATION_TIMEOUT_S):
                while True:
                    for entry in self.entries:
                        if entry["kind"] == kind and not entry["taken"]:
                            entry["taken"] = True
                            return entry["value"]
                    await self.arrived.wait()
        except TimeoutError:
            raise AssertionError(f"no {kind} notification within {NOTIFICATION_TIMEOUT_S} s") from None

    def untaken(self, kind: str) -> list:
        return [e["value"] for e in self.entries if e["kind"] == kind and not e["taken"]]


notifications = Notifications()


def ask_registry(action: str) -> None:
    """Asks the test that owns the server for a change (tests/it/support/interop.rs)."""
    out(f"@registry {action}")


# What the client answers to the server's requests, and what it was asked.
ROOTS = [
    {"uri": "file:///interop/project", "name": "project"},
    {"uri": "file:///interop/docs", "name": "docs"},
]
PROFILE = {"name": "Ada Lovelace", "subscribe": True}
MODEL = "interop-model"
asked: dict[str, list] = {"roots": [], "sampling": [], "elicitation": []}


async def on_list_roots(context) -> types.ListRootsResult:
    asked["roots"].append(True)
    return types.ListRootsResult(roots=[types.Root(**root) for root in ROOTS])


async def on_sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    asked["sampling"].append(params)
    content = params.messages[0].content if params.messages else None
    text = content.text if isinstance(content, types.TextContent) else None
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"sampled: {text}"),
        model=MODEL,
        stopReason="endTurn",
    )


async def on_elicitation(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    asked["elicitation"].append(params)
    return types.ElicitResult(action="accept", content=PROFILE)


async def on_message(message) -> None:
    if isinstance(message, Exception):
        print(f"[client error] {describe(message)}", file=sys.stderr, flush=True)
        return
    if not isinstance(message, types.ServerNotification):
        return
    match message.root:
        case types.ToolListChangedNotification():
            notifications.push("tools")
        case types.ResourceListChangedNotification():
            notifications.push("resources")
        case types.PromptListChangedNotification():
            notifications.push("prompts")
        case types.ResourceUpdatedNotification(params=params):
            notifications.push("updated", str(params.uri))


class HttpLog:
    """Over HTTP: every request the transport makes, with its answer's status and type, and
    the first GET (the session's stream) once its answer arrives."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, int, str]] = []
        self.get_stream: httpx.Response | None = None
        self.get_stream_answered = anyio.Event()

    async def on_response(self, response: httpx.Response) -> None:
        method = response.request.method
        self.requests.append((method, response.status_code, response.headers.get("content-type", "")))
        if method == "GET" and self.get_stream is None:
            self.get_stream = response
            self.get_stream_answered.set()


async def run_checks(transport: str, url: str) -> None:
    over_http = transport == "http"
    http_log = HttpLog()
    session_id = lambda: None  # noqa: E731 (over HTTP, the transport's)
    async with AsyncExitStack() as stack:
        session: ClientSession | None = None
        init: types.InitializeResult | None = None

        async def open_streams():
            nonlocal session_id
            if not over_http:
                return await stack.enter_async_context(websocket_client(url))
            http_client = await stack.enter_async_context(create_mcp_http_client())
            http_client.event_hooks["response"].append(http_log.on_response)
            read, write, session_id = await stack.enter_async_context(
                streamable_http_client(url, http_client=http_client))
            return read, write

        async def connect() -> None:
            nonlocal session, init
            read, write = await open_streams()
            session = await stack.enter_async_context(ClientSession(
                read, write,
                read_timeout_seconds=REQUEST_TIMEOUT,
                sampling_callback=on_sampling,
                elicitation_callback=on_elicitation,
                list_roots_callback=on_list_roots,
                message_handler=on_message,
                client_info=types.Implementation(name="mcp-ws-interop", version="0.1.0"),
            ))
            init = await session.initialize()

        if not await check("connect", connect):
            return
        s = session

        async def get_stream_opened() -> None:
            """The SDK opens it after `notifications/initialized`, on its own time; what the
            server sends the session before it is open is not for this client. The checks
            below that wait for list changes and updates need it open."""
            with anyio.fail_after(REQUEST_TIMEOUT.total_seconds()):
                await http_log.get_stream_answered.wait()
            response = http_log.get_stream
            assert response.status_code == 200, f"GET answered {response.status_code}"
            kind = response.headers.get("content-type", "")
            assert kind.startswith("text/event-stream"), f"GET answered content-type {kind}"

        if over_http:
            await check("GET stream opened", get_stream_opened)

        async def server_info() -> None:
            assert init.serverInfo.name, f"serverInfo has no name: {init.serverInfo!r}"
            caps = init.capabilities
            missing = [k for k in ("tools", "resources", "prompts", "logging") if getattr(caps, k) is None]
            assert not missing, f"capabilities missing {', '.join(missing)}: {caps!r}"

        await check("server-info", server_info)

        async def tools_list() -> None:
            names = [t.name for t in (await s.list_tools()).tools]
            missing = [n for n in ("echo", "add", "sleep", "fail") if n not in names]
            assert not missing, f"missing tools {', '.join(missing)} (got {', '.join(names)})"

        await check("tools/list", tools_list)

        async def call_echo() -> None:
            r = await s.call_tool("echo", {"text": "hello interop"})
            assert not r.isError, f"isError is {r.isError}"
            assert first_text(r) == "hello interop", f"content[0] = {r.content[0]!r}"

        await check("tools/call echo", call_echo)

        async def call_add() -> None:
            r = await s.call_tool("add", {"a": 2, "b": 40})
            assert not r.isError, f"isError is {r.isError}"
            text = first_text(r).strip()
            assert text and float(text) == 42, f"expected 42, got {text!r}"

        await check("tools/call add", call_add)

        async def call_fail() -> None:
            r = await s.call_tool("fail", {"message": "boom"})
            assert r.isError is True, f"isError is {r.isError}"
            assert "boom" in first_text(r), f"text does not contain 'boom': {first_text(r)!r}"

        await check("tools/call fail", call_fail)

        async def call_sleep() -> None:
            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            await s.call_tool("sleep", {"ms": 300}, progress_callback=on_progress)
            assert progress, "no progress notification received"
            assert all(a < b for a, b in zip(progress, progress[1:])), \
                f"progress not strictly increasing: {progress}"

        await check("tools/call sleep with progress", call_sleep)

        async def list_and_read() -> None:
            resources = (await s.list_resources()).resources
            assert resources, "no resources listed"
            uri = str(resources[0].uri)
            contents = (await s.read_resource(uri)).contents
            assert any(str(c.uri) == uri for c in contents), f"no content entry with uri {uri}: {contents!r}"[:300]

        await check("resources/list + resources/read", list_and_read)

        async def prompts_get() -> None:
            names = [p.name for p in (await s.list_prompts()).prompts]
            assert "greet" in names, f"no 'greet' prompt (got {', '.join(names)})"
            r = await s.get_prompt("greet", {"name": "Ada"})
            hit = any(isinstance(m.content, types.TextContent) and "Ada" in m.content.text for m in r.messages)
            assert hit, f"no message text contains 'Ada': {r.messages!r}"[:300]

        await check("prompts/list + prompts/get greet", prompts_get)

        await check("prompts/get greet missing argument -> -32602",
                    lambda: expect_rpc_error(s.get_prompt("greet"), types.INVALID_PARAMS))
        await check("tools/call unknown tool -> -32602",
                    lambda: expect_rpc_error(s.call_tool("no_such_tool_interop", {}), types.INVALID_PARAMS))
        await check("ping", s.send_ping)
        await check("logging/setLevel debug", lambda: s.set_logging_level("debug"))

        # --- Requests from the server, made from inside a tool ---

        async def call_for_json(name: str, arguments: dict) -> object:
            r = await s.call_tool(name, arguments)
            text = first_text(r)
            assert not r.isError, f"isError is {r.isError}: {text}"
            return json.loads(text)

        async def roots() -> None:
            answered = await call_for_json("ask_roots", {})
            assert len(asked["roots"]) == 1, f"roots/list was asked {len(asked['roots'])} times"
            assert answered == {"roots": ROOTS}, f"the tool got {answered}"

        await check("roots/list answered inside a tool", roots)

        async def sampling() -> None:
            args = {"prompt": "What is 6 x 7?", "maxTokens": 64, "systemPrompt": "Answer briefly."}
            answered = await call_for_json("ask_sampling", args)
            assert len(asked["sampling"]) == 1, f"sampling was asked {len(asked['sampling'])} times"
            params = asked["sampling"][0]
            messages = [m.model_dump(mode="json", exclude_none=True) for m in params.messages]
            expected = [{"role": "user", "content": {"type": "text", "text": args["prompt"]}}]
            assert messages == expected, f"messages {messages}"
            assert params.maxTokens == args["maxTokens"], f"maxTokens {params.maxTokens}"
            assert params.systemPrompt == args["systemPrompt"], f"systemPrompt {params.systemPrompt}"
            assert answered == {
                "role": "assistant",
                "model": MODEL,
                "text": f"sampled: {args['prompt']}",
                "stopReason": "endTurn",
            }, f"the tool got {answered}"

        await check("sampling/createMessage answered inside a tool", sampling)

        async def elicitation() -> None:
            message = "Who are you?"
            answered = await call_for_json("ask_elicitation", {"message": message})
            count = len(asked["elicitation"])
            assert count == 1, f"elicitation was asked {count} times"
            params = asked["elicitation"][0]
            assert isinstance(params, types.ElicitRequestFormParams), f"not a form: {params!r}"
            assert params.message == message, f"message {params.message}"
            schema = params.requestedSchema
            assert schema.get("type") == "object", f"requestedSchema {schema}"
            props = schema.get("properties", {})
            assert props.get("name", {}).get("type") == "string" \
                and props.get("subscribe", {}).get("type") == "boolean", f"requestedSchema properties {props}"
            assert answered == {"action": "accept", "content": PROFILE}, f"the tool got {answered}"

        await check("elicitation/create answered inside a tool", elicitation)

        # --- Registry changes while connected (and idle) ---

        added = {"tools": "interop_added", "resources": "interop://added", "prompts": "interop_added"}

        async def next_list_change(kind: str) -> list[str]:
            """Waits for the next list change of `kind`, then lists it (the SDK does not). The
            server must declare it sends them."""
            declared = getattr(init.capabilities, kind).listChanged
            assert declared is True, f"capabilities.{kind}.listChanged is {declared}"
            await notifications.next(kind)
            if kind == "tools":
                return [t.name for t in (await s.list_tools()).tools]
            if kind == "resources":
                return [str(r.uri) for r in (await s.list_resources()).resources]
            return [p.name for p in (await s.list_prompts()).prompts]

        ask_registry("add")

        async def tools_changed() -> None:
            names = await next_list_change("tools")
            assert added["tools"] in names, f"tools now: {', '.join(names)}"

        async def resources_changed() -> None:
            uris = await next_list_change("resources")
            assert added["resources"] in uris, f"resources now: {', '.join(uris)}"

        async def prompts_changed() -> None:
            names = await next_list_change("prompts")
            assert added["prompts"] in names, f"prompts now: {', '.join(names)}"

        await check("tools/list_changed after a tool is added", tools_changed)
        await check("resources/list_changed after a resource is added", resources_changed)
        await check("prompts/list_changed after a prompt is added", prompts_changed)

        async def call_added() -> None:
            r = await s.call_tool(added["tools"], {})
            assert not r.isError, f"isError is {r.isError}"
            assert first_text(r) == "added at run time", f"text {first_text(r)!r}"

        await check("tools/call a tool added at run time", call_added)

        ask_registry("remove")

        async def all_changed_back() -> None:
            for kind in ("tools", "resources", "prompts"):
                keys = await next_list_change(kind)
                assert added[kind] not in keys, f"{kind} still has {added[kind]}"

        await check("list_changed for each list after the additions are removed", all_changed_back)

        # --- Resource subscriptions ---

        watched_a = "interop://watched/a"
        watched_b = "interop://watched/b"

        async def expect_update_of_only(loud: str, quiet: str) -> None:
            """Asks for updates of `quiet` then `loud` (published in that order), waits for the
            one of `loud`, then asks for `loud` again and waits for that one too: the server
            sends what is not part of a request on one ordered stream (the socket, or the GET
            stream), so had it sent one for `quiet`, published before, it would have come
            before this fence. (A ping's answer is no fence over HTTP: it comes back on another
            connection.)"""
            ask_registry(f"updated {quiet}")
            ask_registry(f"updated {loud}")
            uri = await notifications.next("updated")
            assert uri == loud, f"resources/updated for {uri}, expected {loud}"
            ask_registry(f"updated {loud}")
            fence = await notifications.next("updated")
            assert fence == loud, f"resources/updated for {fence}, expected {loud} again"
            extra = notifications.untaken("updated")
            assert not extra, f"resources/updated also for {', '.join(extra)}"

        async def subscribed_only() -> None:
            declared = init.capabilities.resources.subscribe
            assert declared is True, f"capabilities.resources.subscribe is {declared}"
            await s.subscribe_resource(watched_a)
            await expect_update_of_only(watched_a, watched_b)

        await check("resources/updated for a subscribed resource only", subscribed_only)

        async def unsubscribed() -> None:
            await s.unsubscribe_resource(watched_a)
            await s.subscribe_resource(watched_b)
            await expect_update_of_only(watched_b, watched_a)

        await check("resources/unsubscribe stops its updates", unsubscribed)

        async def ended_with_delete() -> None:
            ended = session_id()
            assert ended, f"no session id: {ended!r}"
            # Leaving the transport's context sends DELETE (the SDK only logs a failure).
            await stack.aclose()
            deletes = [status for method, status, _ in http_log.requests if method == "DELETE"]
            assert deletes == [200], f"DELETE answered {deletes}"
            async with httpx.AsyncClient() as plain:
                response = await plain.post(url, headers={
                    "content-type": "application/json",
                    "accept": "application/json, text/event-stream",
                    "mcp-session-id": ended,
                }, json={"jsonrpc": "2.0", "id": "after-delete", "method": "ping"})
            assert response.status_code == 404, \
                f"a POST with the ended session's id got {response.status_code}"

        if over_http:
            await check("session ended with DELETE (its id is then unknown: 404)", ended_with_delete)


async def main() -> int:
    global failed
    args = sys.argv[1:]
    transport = "ws"
    if args[:1] == ["--transport"]:
        transport, args = args[1] if len(args) > 1 else "", args[2:]
    if len(args) != 1 or transport not in ("ws", "http"):
        print("usage: python client.py [--transport ws|http] URL", file=sys.stderr)
        return 2
    try:
        with anyio.fail_after(OVERALL_TIMEOUT_S):
            await run_checks(transport, args[0])
    except TimeoutError:
        failed += 1
        out(f"FAIL overall-timeout: not finished within {OVERALL_TIMEOUT_S} s")
    except Exception as e:  # closing the session or the socket failed
        print(f"[close error] {describe(e)}", file=sys.stderr, flush=True)
    out(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
