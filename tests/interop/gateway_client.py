"""Gateway client: the official Python MCP SDK (mcp[ws] 1.30.0) drives mcp-ws serving two
upstreams it does not know: `py` (tests/interop/gateway_upstream.py, FastMCP over stdio, one
child per session) and `every` (@modelcontextprotocol/server-everything over stdio, one child
shared by every session). Run by tests/it/gateway.rs.

Usage: python gateway_client.py --transport ws|http URL

Prints one line per check ("ok <name>" or "FAIL <name>: <reason>"), then "N passed, M failed".
"""

import logging
import os
import re
import sys
import warnings
from contextlib import AsyncExitStack
from datetime import timedelta

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

warnings.simplefilter("ignore", DeprecationWarning)
from mcp.client.websocket import websocket_client  # noqa: E402

REQUEST_TIMEOUT = timedelta(seconds=20)
NOTIFICATION_TIMEOUT_S = 10


class ClientErrors(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        print(f"[client error] {record.levelname} {record.name}: {record.getMessage()}",
              file=sys.stderr, flush=True)


logging.basicConfig(level=logging.WARNING, handlers=[ClientErrors()])

passed = 0
failed = 0


def out(line: str) -> None:
    print(line, flush=True)


def describe(e: BaseException) -> str:
    if isinstance(e, McpError):
        return " ".join(f"McpError code={e.error.code}: {e.error.message}".split())
    return " ".join(f"{type(e).__name__}: {e}".split())


async def check(name: str, fn) -> None:
    global passed, failed
    try:
        await fn()
    except Exception as e:
        failed += 1
        out(f"FAIL {name}: {describe(e)}")
        return
    passed += 1
    out(f"ok {name}")


def text_of(result: types.CallToolResult) -> str:
    assert result.content, f"no content: {result!r}"
    block = result.content[0]
    assert isinstance(block, types.TextContent), f"not text: {block!r}"
    return block.text


logs: list[str] = []
tools_changed = anyio.Event()
updated: list[str] = []


async def on_log(params: types.LoggingMessageNotificationParams) -> None:
    logs.append(str(params.data))


async def on_message(message) -> None:
    if isinstance(message, Exception):
        print(f"[client error] {describe(message)}", file=sys.stderr, flush=True)
        return
    if not isinstance(message, types.ServerNotification):
        return
    if isinstance(message.root, types.ToolListChangedNotification):
        tools_changed.set()
    elif isinstance(message.root, types.ResourceUpdatedNotification):
        updated.append(str(message.root.params.uri))


async def on_elicitation(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def on_sampling(context, params) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="4"),
        model="gateway-test-model", stopReason="endTurn")


async def run_checks(transport: str, url: str) -> None:
    async with AsyncExitStack() as stack:
        if transport == "ws":
            read, write = await stack.enter_async_context(websocket_client(url))
        else:
            read, write, _ = await stack.enter_async_context(streamable_http_client(url))
        s = await stack.enter_async_context(ClientSession(
            read, write, read_timeout_seconds=REQUEST_TIMEOUT,
            logging_callback=on_log, message_handler=on_message,
            elicitation_callback=on_elicitation, sampling_callback=on_sampling,
            client_info=types.Implementation(name="gateway-client", version="0.1.0")))
        await s.initialize()
        await s.set_logging_level("info")

        async def listed():
            names = {t.name for t in (await s.list_tools()).tools}
            for name in ("py__add", "py__slow", "py__ask_name", "every__echo", "every__get-sum"):
                assert name in names, f"{name} not listed: {sorted(names)}"
            assert "add" not in names, "an upstream tool is listed without its prefix"
        await check("tools of both upstreams listed under their prefixes", listed)

        async def structured():
            result = await s.call_tool("py__add", {"a": 2, "b": 3})
            assert not result.isError, result
            assert result.structuredContent == {"sum": 5.0}, result.structuredContent
            assert '"sum"' in text_of(result), text_of(result)
        await check("a call's result and structured content pass through", structured)

        async def shared_upstream():
            result = await s.call_tool("every__echo", {"message": "hi"})
            assert text_of(result) == "Echo: hi", text_of(result)
        await check("server-everything answers through the shared child", shared_upstream)

        async def progress_and_logs():
            seen = []

            async def on_progress(progress, total, message):
                seen.append((progress, total, message))

            logs.clear()
            result = await s.call_tool("py__slow", {"steps": 3, "delay_ms": 150},
                                       progress_callback=on_progress)
            assert text_of(result) == "done", result
            assert [p for p, _, _ in seen] == [1, 2, 3], f"progress seen: {seen}"
            assert seen[-1][1] == 3 and seen[-1][2] == "step 3", seen
            with anyio.fail_after(5):
                while len([l for l in logs if "of 3" in l]) < 3:
                    await anyio.sleep(0.05)
        await check("upstream progress and log lines reach the client", progress_and_logs)

        async def level_respected():
            logs.clear()
            await s.set_logging_level("error")
            await s.call_tool("py__slow", {"steps": 2, "delay_ms": 10})
            await anyio.sleep(0.3)
            await s.set_logging_level("info")
            assert not logs, f"info lines arrived at level error: {logs}"
        await check("upstream log lines respect the client's level", level_respected)

        async def elicitation():
            assert text_of(await s.call_tool("py__ask_name", {})) == "hello Ada"
        await check("an upstream's elicitation reaches the client and back", elicitation)

        async def sampling():
            assert text_of(await s.call_tool("py__ask_model", {})) == "model said 4"
        await check("an upstream's sampling request reaches the client and back", sampling)

        async def content_kinds():
            result = await s.call_tool("py__image", {})
            kinds = [c.type for c in result.content]
            assert kinds == ["image", "resource_link"], kinds
            assert result.content[0].data == "iVBORw0KGgo=" and str(result.content[1].uri).startswith("mem://motd")
        await check("image and resource_link blocks pass through unchanged", content_kinds)

        async def is_error():
            result = await s.call_tool("py__fail", {})
            assert result.isError, result
            assert "always fails" in text_of(result), text_of(result)
        await check("an upstream isError result stays one", is_error)

        async def resources():
            listed = {str(r.uri) for r in (await s.list_resources()).resources}
            assert "mem://motd" in listed, listed
            contents = (await s.read_resource("mem://motd")).contents
            assert contents[0].text == "hello from upstream", contents
            templates = {t.uriTemplate for t in (await s.list_resource_templates()).resourceTemplates}
            assert "mem://items/{id}" in templates, templates
            assert (await s.read_resource("mem://items/7")).contents[0].text == "item 7"
        await check("resources and templates read through the upstream", resources)

        async def subscription():
            await s.subscribe_resource("mem://motd")
            assert text_of(await s.call_tool("py__touch", {"uri": "mem://items/1"})) == "touched"
            assert text_of(await s.call_tool("py__touch", {"uri": "mem://motd"})) == "touched"
            with anyio.fail_after(NOTIFICATION_TIMEOUT_S):
                while "mem://motd" not in updated:
                    await anyio.sleep(0.05)
            assert updated == ["mem://motd"], f"updates for what was not subscribed: {updated}"
        await check("an upstream's resources/updated reaches the subscribed client", subscription)

        async def prompts():
            result = await s.get_prompt("py__greet", {"name": "Bob"})
            assert "Bob" in result.messages[0].content.text, result
        await check("a prompt renders through the upstream", prompts)

        async def own_child():
            first = text_of(await s.call_tool("py__whoami", {}))
            second = text_of(await s.call_tool("py__whoami", {}))
            assert first == second and first.startswith("pid="), (first, second)
        await check("a per-session upstream keeps one child for the session", own_child)

        # A name no earlier run added: the upstream's list really changes.
        name = f"grown_{os.getpid()}_{transport}"

        async def list_changed():
            result = await s.call_tool("py__grow", {"name": name})
            assert text_of(result) == "grew"
            with anyio.fail_after(NOTIFICATION_TIMEOUT_S):
                await tools_changed.wait()
            listed = {t.name for t in (await s.list_tools()).tools}
            assert f"py__{name}" in listed, sorted(listed)
            assert text_of(await s.call_tool(f"py__{name}", {})) == "grown"
        await check("an upstream's tools/list_changed reaches the client, list updated", list_changed)

        async def garbage():
            assert text_of(await s.call_tool("py__garbage", {})) == "still here"
        await check("a line of garbage from the child is skipped", garbage)

        async def crash():
            global tools_changed
            tools_changed = anyio.Event()
            before = text_of(await s.call_tool("py__whoami", {}))
            try:
                await s.call_tool("py__crash", {})
                raise AssertionError("the crash was answered with a result")
            except McpError as e:
                assert e.error.code == -32030, (e.error.code, e.error.message)
                assert "py" in e.error.message, e.error.message
            after = text_of(await s.call_tool("py__whoami", {}))
            assert re.match(r"pid=\d+", after) and after != before, (before, after)
            # The fresh child never grew the tool: the session is told, and no longer lists it.
            with anyio.fail_after(NOTIFICATION_TIMEOUT_S):
                await tools_changed.wait()
            listed = {t.name for t in (await s.list_tools()).tools}
            assert f"py__{name}" not in listed, sorted(listed)
        await check(
            "a crashed child answers -32030 and the next call gets a fresh one, its list too",
            crash,
        )

        async def unknown():
            try:
                await s.call_tool("py__nope", {})
                raise AssertionError("an unknown tool was answered")
            except McpError as e:
                assert e.error.code == -32602, e.error.code
        await check("an unknown prefixed tool is -32602", unknown)


async def main() -> int:
    args = sys.argv[1:]
    if len(args) != 3 or args[0] != "--transport" or args[1] not in ("ws", "http"):
        print("usage: python gateway_client.py --transport ws|http URL", file=sys.stderr)
        return 2
    await run_checks(args[1], args[2])
    out(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
