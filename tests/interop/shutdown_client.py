"""A tool call in flight when the server shuts down, as the official Python SDK (`mcp[ws]`
1.30.0) lives it: over `--transport ws` (websocket_client) or `--transport http`
(streamable_http_client, a 2025-11-25 session), it initializes, prints `CALLING`, calls the
demo tool `sleep` (1.5 s, no `tools/list` before: the SDK lists the tools by itself after the
call, to check the result against its output schema), and prints `RESULT <text>` once
`call_tool` returned. The test sends SIGTERM to the server once it read `CALLING` and the call
is running: the call must still return its result, and nothing may raise (exit status 0).

    python shutdown_client.py --transport ws|http URL
"""

import argparse
import sys
import warnings
from datetime import timedelta

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

warnings.simplefilter("ignore", DeprecationWarning)
from mcp.client.websocket import websocket_client  # noqa: E402

REQUEST_TIMEOUT = timedelta(seconds=10)


async def run(transport: str, url: str) -> None:
    if transport == "ws":
        opened = websocket_client(url)
    else:
        opened = streamable_http_client(url)
    with anyio.fail_after(20):
        await session_call(opened)


async def session_call(opened) -> None:
    async with opened as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT) as session:
            await session.initialize()
            print("CALLING", flush=True)
            result = await session.call_tool("sleep", {"ms": 1500})
            texts = [block.text for block in result.content if block.type == "text"]
            print("RESULT", "error" if result.isError else " ".join(texts), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["ws", "http"], required=True)
    parser.add_argument("url")
    args = parser.parse_args()
    anyio.run(run, args.transport, args.url)


if __name__ == "__main__":
    try:
        main()
    except BaseException as error:  # noqa: BLE001 (reported, then the exit status says it)
        causes = getattr(error, "exceptions", None) or [error]
        described = "; ".join(f"{type(e).__name__}: {e}" for e in causes)
        print(f"RAISED {type(error).__name__}: {described}", flush=True)
        sys.exit(1)
