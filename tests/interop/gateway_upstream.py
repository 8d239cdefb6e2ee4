"""An MCP server written with FastMCP (the official Python SDK, mcp 1.30.0), put behind mcp-ws
as an upstream by tests/it/gateway.rs (over stdio, Streamable HTTP or WebSocket). Nothing in
it knows of mcp-ws.

Tools:
  add(a, b)             a + b, as text and as structured content
  whoami()              this process's pid and $MCP_USER (per-session vs shared children)
  for_<user>()          with $GATEWAY_USER_TOOL set and $MCP_USER given: a tool of that
                        client's own (a per-session child's list differs from the gateway's
                        start-time child's, which runs for no client)
  <name>()              for each name of $GATEWAY_SESSION_TOOLS (comma-separated), with
                        $MCP_USER given: "<name> of the child" (a per-session child offering
                        a name the gateway's start-time child did not)
  level()               the log level the client last set (logging/setLevel), or "-"
  slow(steps, delay_ms) reports progress and logs a line per step, then says "done"
  wait(ms)              sleeps; records in $GATEWAY_EVENTS whether it was cancelled
  ask_name()            elicits a name from the client
  ask_model()           asks the client's model (sampling)
  ask_model_after(ms)   waits, then asks the client's model
  image()               one image block and one resource_link block
  big(bytes)            a text of `bytes` x's (an answer past a gateway's max_message_bytes)
  fail()                raises: an isError result
  crash()               the process exits at once (status 3) mid-call (over WebSocket: the
                        server, with every connection)
  garbage()             writes a line that is not JSON to stdout, then answers
  not_utf8(stream)      writes a line that is not UTF-8 to stdout or stderr, then 100 lines
                        to stderr, then answers
  grow(name)            adds a tool of that name and tells the client the list changed
  flood(count)          tells the client `count` times that the tool list changed, all but
                        the first while the tools/list after the first is held unanswered
  stall_lists()         leaves every tools/list from then on unanswered, and tells the client
                        the tool list changed (each tools/list is recorded in $GATEWAY_EVENTS)
  touch(uri)            sends resources/updated for uri (the server offers subscriptions)
  rename_many(prefix)   with $GATEWAY_MANY=N, its list also holds N tools named a_0 … a_N-1:
                        they become prefix_0 … prefix_N-1 (N others), and the client is told
                        the tool list changed
Resource mem://motd, template mem://items/{id}, prompt greet(name). With $GATEWAY_UNUSABLE
set, its lists also hold what clients cannot use: a prompt naming an argument twice, one
with a control character in its name, and a template naming a variable twice.

Over stdio, with $GATEWAY_EVENTS, a child records "started PID session" (or "... alone") there; $GATEWAY_START_DELAY_MS
holds its start back that long. Over WebSocket, each connection records "ws connection".

Usage: python gateway_upstream.py              (stdio)
       python gateway_upstream.py --http PORT  (Streamable HTTP at http://127.0.0.1:PORT/mcp)
       python gateway_upstream.py --ws PORT    (WebSocket at ws://127.0.0.1:PORT/ws: the SDK's
                                                websocket_server in a Starlette route, under
                                                uvicorn; it requires the `mcp` subprotocol)
"""

import asyncio
import os
import sys

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ImageContent, ResourceLink, SamplingMessage, TextContent
from pydantic import BaseModel

server = FastMCP("gateway-upstream")
EVENTS = os.environ.get("GATEWAY_EVENTS")


def record(line: str) -> None:
    if EVENTS:
        with open(EVENTS, "a") as f:
            f.write(line + "\n")


class Sum(BaseModel):
    sum: float


@server.tool()
def add(a: float, b: float) -> Sum:
    """Adds two numbers."""
    return Sum(sum=a + b)


@server.tool()
def whoami() -> str:
    """This process's pid and the user it was started for."""
    return f"pid={os.getpid()} user={os.environ.get('MCP_USER', '-')}"


USER = os.environ.get("MCP_USER")
if os.environ.get("GATEWAY_USER_TOOL") and USER:

    def for_user() -> str:
        """Only this client's own child has it."""
        return f"for {USER}"

    server.add_tool(for_user, name=f"for_{USER}")


def of_the_child(name: str):
    def answer() -> str:
        """Only a client's own child has it."""
        return f"{name} of the child"

    return answer


if USER:
    for session_tool in filter(None, os.environ.get("GATEWAY_SESSION_TOOLS", "").split(",")):
        server.add_tool(of_the_child(session_tool), name=session_tool)


# The log level the client last set (logging/setLevel); declaring the handler is what makes
# the server offer the logging capability.
LEVEL = {"last": "-"}


@server._mcp_server.set_logging_level()
async def set_level(level) -> None:
    LEVEL["last"] = level


@server.tool()
def level() -> str:
    """The log level the client last set with logging/setLevel, or "-"."""
    return LEVEL["last"]


@server.tool()
async def slow(steps: int, delay_ms: int, ctx: Context, pause_after_ms: int = 0) -> str:
    """Reports progress and logs a line for each step; then waits pause_after_ms before it
    answers."""
    for step in range(1, steps + 1):
        await asyncio.sleep(delay_ms / 1000)
        await ctx.report_progress(step, steps, f"step {step}")
        await ctx.info(f"step {step} of {steps}")
    await asyncio.sleep(pause_after_ms / 1000)
    return "done"


@server.tool()
async def wait(ms: int, tag: str) -> str:
    """Sleeps; records whether it finished or was cancelled."""
    try:
        await asyncio.sleep(ms / 1000)
    except asyncio.CancelledError:
        record(f"cancelled {tag}")
        raise
    record(f"finished {tag}")
    return f"waited {tag}"


class Name(BaseModel):
    name: str


@server.tool()
async def ask_name(ctx: Context) -> str:
    """Asks the user for a name."""
    answer = await ctx.elicit("What is your name?", schema=Name)
    if answer.action == "accept":
        return f"hello {answer.data.name}"
    return f"no name ({answer.action})"


@server.tool()
async def ask_model(ctx: Context) -> str:
    """Asks the client's model."""
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text="2+2?"))],
        max_tokens=10,
    )
    return f"model said {result.content.text}"


@server.tool()
async def ask_model_after(ms: int, ctx: Context) -> str:
    """Waits, then asks the client's model."""
    await asyncio.sleep(ms / 1000)
    return await ask_model(ctx)


@server.tool()
def image() -> list:
    """An image and a link."""
    return [
        ImageContent(type="image", data="iVBORw0KGgo=", mimeType="image/png"),
        ResourceLink(type="resource_link", uri="mem://motd", name="motd"),
    ]


@server.tool()
def big(bytes: int) -> str:
    """A text of `bytes` x's."""
    return "x" * bytes


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("this tool always fails")


@server.tool()
def crash() -> str:
    """Exits the process mid-call."""
    os._exit(3)


@server.tool()
def garbage() -> str:
    """Writes a line that is not JSON-RPC to stdout, then answers."""
    sys.stdout.write("this is not json\n")
    sys.stdout.flush()
    return "still here"


@server.tool()
async def not_utf8(stream: str) -> str:
    """Writes a line that is not UTF-8 to `stream` (stdout or stderr), then, a moment
    later, 100 more lines to stderr (which fail if the gateway stopped reading it), then
    answers."""
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.buffer.write(b"caf\xe9 \xff\xfe\n")
    out.flush()
    await asyncio.sleep(0.3)
    for n in range(100):
        sys.stderr.write(f"after {n}\n")
        sys.stderr.flush()
    return "still here"


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool of this name and says the list changed."""

    def grown() -> str:
        """Added at run time."""
        return "grown"

    server.add_tool(grown, name=name)
    await ctx.session.send_tool_list_changed()
    return "grew"


# Each tools/list recorded ("listed tools"); after stall_lists(), never answered; during
# flood(), held until the flood is over.
LISTS = {"stalled": False, "held": None}


@server.tool()
async def flood(count: int, ctx: Context) -> str:
    """Says `count` times that its tool list changed: once, then, while the tools/list that
    follows is held unanswered, `count - 1` times in a row; then answers the held list."""
    held = asyncio.Event()
    LISTS["held"] = held
    await ctx.session.send_tool_list_changed()
    await asyncio.sleep(0.5)
    for _ in range(count - 1):
        await ctx.session.send_tool_list_changed()
    await asyncio.sleep(0.5)
    LISTS["held"] = None
    held.set()
    return "flooded"


@server.tool()
async def stall_lists(ctx: Context) -> str:
    """From now on leaves tools/list unanswered, and says its tool list changed."""
    LISTS["stalled"] = True
    await ctx.session.send_tool_list_changed()
    return "stalled"


# With $GATEWAY_MANY=N: N tools, listed only (never called), under the prefix rename_many()
# last gave.
MANY = {"count": int(os.environ.get("GATEWAY_MANY", "0")), "prefix": "a"}


@server.tool()
async def rename_many(prefix: str, ctx: Context) -> str:
    """Replaces the N listed tools with N others, named with `prefix`; says the list changed."""
    MANY["prefix"] = prefix
    await ctx.session.send_tool_list_changed()
    return "renamed"


def many_tools() -> list:
    from mcp.types import Tool

    schema = {"type": "object", "properties": {}}
    return [
        Tool(name=f"{MANY['prefix']}_{n}", inputSchema=schema) for n in range(MANY["count"])
    ]


async def list_tools_recorded():
    record("listed tools")
    if LISTS["stalled"]:
        await asyncio.Event().wait()
    if LISTS["held"] is not None:
        await LISTS["held"].wait()
    return await server.list_tools() + many_tools()


@server._mcp_server.subscribe_resource()
async def subscribed(uri) -> None:
    record(f"subscribed {uri}")


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    """Says the resource at `uri` changed (to a client that subscribed to it)."""
    await ctx.session.send_resource_updated(uri)
    return "touched"


@server.resource("mem://motd", mime_type="text/plain")
def motd() -> str:
    """Message of the day."""
    return "hello from upstream"


@server.resource("mem://items/{id}")
def item(id: str) -> str:
    """One item."""
    return f"item {id}"


@server.prompt()
def greet(name: str) -> str:
    """Greets someone."""
    return f"Please greet {name}."


if os.environ.get("GATEWAY_UNUSABLE"):
    from mcp.types import Prompt, PromptArgument, ResourceTemplate

    @server._mcp_server.list_prompts()
    async def list_prompts_with_unusable():
        twice = [PromptArgument(name="a"), PromptArgument(name="a")]
        return await server.list_prompts() + [
            Prompt(name="twice", arguments=twice),
            Prompt(name="bad\nname"),
        ]

    @server._mcp_server.list_resource_templates()
    async def list_templates_with_unusable():
        twice = ResourceTemplate(uriTemplate="mem://twice/{a}/{a}", name="twice")
        return await server.list_resource_templates() + [twice]


class OverWebSocket:
    """An ASGI app serving `server` to each WebSocket connection, through the SDK's own
    WebSocket transport (FastMCP has no WebSocket mode of its own)."""

    async def __call__(self, scope, receive, send) -> None:
        from mcp.server.websocket import websocket_server

        record("ws connection")
        async with websocket_server(scope, receive, send) as (read, write):
            lowlevel = server._mcp_server
            await lowlevel.run(read, write, lowlevel.create_initialization_options())


def serve_websocket(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute

    app = Starlette(routes=[WebSocketRoute("/ws", OverWebSocket())])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


# In place of FastMCP's own tools/list handler (registered as the server was made).
server._mcp_server.list_tools()(list_tools_recorded)


if __name__ == "__main__":
    # `--http PORT`: Streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio.
    if sys.argv[1:2] == ["--http"]:
        server.settings.host = "127.0.0.1"
        server.settings.port = int(sys.argv[2])
        server.run("streamable-http")
    # `--ws PORT`: WebSocket on 127.0.0.1:PORT/ws.
    elif sys.argv[1:2] == ["--ws"]:
        serve_websocket(int(sys.argv[2]))
    else:
        # With $GATEWAY_EVENTS, each child says it started, and whether for a session ($MCP_USER
        # given) or not (the gateway's discovery at start); $GATEWAY_START_DELAY_MS holds its
        # start (and so its answer to `initialize`) back that long.
        record(f"started {os.getpid()} {'session' if 'MCP_USER' in os.environ else 'alone'}")
        import time

        time.sleep(int(os.environ.get("GATEWAY_START_DELAY_MS", "0")) / 1000)
        server.run("stdio")
