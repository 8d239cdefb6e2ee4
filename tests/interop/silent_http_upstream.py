"""A Streamable HTTP MCP server (2025-11-25, JSON answers) that never answers a tools/call:
the upstream of a gateway test about calls cancelled or timed out while the upstream holds
their POSTs without a response head (a server that sends its head only with its answer).

Usage: python silent_http_upstream.py PORT EVENTS_FILE

Recorded in EVENTS_FILE, a line each: "held" for a tools/call it holds, "dropped" when the
client closes the connection of one, "cancelled <id>" for each `notifications/cancelled`.
Standard library only.
"""

import asyncio
import json
import sys

PORT = int(sys.argv[1])
EVENTS = sys.argv[2]
SESSION = "silent-session"


def record(line: str) -> None:
    with open(EVENTS, "a") as f:
        f.write(line + "\n")


async def respond(writer, status: str, body: bytes = b"", headers=()) -> None:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
    if body:
        head.append("Content-Type: application/json")
    head.extend(headers)
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    await writer.drain()


def result(message: dict, value: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": value}).encode()


async def serve(reader, writer) -> None:
    try:
        while True:
            request_line = await reader.readline()
            if not request_line:
                return
            method = request_line.split(b" ")[0]
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.decode().partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b""
            if method != b"POST":
                await respond(writer, "405 Method Not Allowed")
                continue
            message = json.loads(body)
            rpc = message.get("method")
            if "id" not in message:
                if rpc == "notifications/cancelled":
                    record(f"cancelled {message['params']['requestId']}")
                await respond(writer, "202 Accepted")
            elif rpc == "initialize":
                value = {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "silent", "version": "1.0.0"},
                }
                await respond(
                    writer,
                    "200 OK",
                    result(message, value),
                    [f"Mcp-Session-Id: {SESSION}"],
                )
            elif rpc == "tools/list":
                tool = {
                    "name": "wait",
                    "description": "Never answers.",
                    "inputSchema": {"type": "object"},
                }
                await respond(writer, "200 OK", result(message, {"tools": [tool]}))
            elif rpc == "tools/call":
                # No answer, no head: the connection is held until the client drops it.
                record("held")
                await reader.read()
                record("dropped")
                return
            else:
                await respond(writer, "200 OK", result(message, {}))
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", PORT)
    async with server:
        await server.serve_forever()


asyncio.run(main())
