#!/usr/bin/env python3
"""Memory of an idle WebSocket session, plain (ws://) and over TLS (wss://), from the server's
RSS: what `benches/pinned.sh sessions` measures for plain sessions at 18,000, here for both
with the same client, so that TLS's share shows beside the plain figure.

    benches/session_memory.py BINARY [SESSIONS] [MODE...]      (default 3000, ws wss)

Needs `openssl` (a self-signed certificate is made for 127.0.0.1) and the `websockets`
package (tests/interop's venv has it: tests/interop/.venv/bin/python benches/session_memory.py
…). For each mode the server starts alone on core 0 with benches/load.toml (room for many
sessions) and the per-address caps lifted (every session comes from 127.0.0.1), its log at
`warn`; one session is opened and closed first, then SESSIONS sessions are opened (initialize
and notifications/initialized, 64 at a time), and after 3 s the RSS grown is divided by
SESSIONS. Prints one line per mode and a RESULT_JSON line.
"""
import asyncio
import ctypes
import json
import os
import pathlib
import signal
import ssl
import subprocess
import sys
import tempfile
import time

import websockets

ROOT = pathlib.Path(__file__).resolve().parent.parent
INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "session-memory", "version": "1"}},
})
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})


def config(work, tls):
    """benches/load.toml with the per-address caps lifted, and [tls] when `tls`."""
    text = (ROOT / "benches/load.toml").read_text()
    if "max_sessions_per_ip = 0\n" not in text:
        sys.exit("benches/load.toml no longer lifts max_sessions_per_ip: update this script")
    text = text.replace(
        "max_sessions_per_ip = 0\n",
        "max_sessions_per_ip = 0\nmax_handshakes_per_ip = 0\nmax_connections_per_ip = 0\n",
    )
    if tls:
        text += f'\n[tls]\ncert_file = "{work}/cert.pem"\nkey_file = "{work}/key.pem"\n'
    path = pathlib.Path(work, "tls.toml" if tls else "plain.toml")
    path.write_text(text)
    return path


def die_with_parent():
    """In the server's process before it runs: SIGTERM when this script's process ends
    (Linux `prctl(PR_SET_PDEATHSIG)`; kept across `taskset`'s exec)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def rss(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def open_session(uri, context, sessions):
    ws = await websockets.connect(uri, ssl=context, subprotocols=["mcp"], max_size=None,
                                  ping_interval=None, open_timeout=30)
    await ws.send(INITIALIZE)
    answer = json.loads(await ws.recv())
    if "result" not in answer:
        raise RuntimeError(f"initialize failed: {answer}")
    await ws.send(INITIALIZED)
    sessions.append(ws)


async def measure(pid, uri, context, count):
    warm = []
    await open_session(uri, context, warm)
    await warm[0].close()
    await asyncio.sleep(0.5)
    before = rss(pid)
    sessions = []
    gate = asyncio.Semaphore(64)

    async def gated():
        async with gate:
            await open_session(uri, context, sessions)

    await asyncio.gather(*(gated() for _ in range(count)))
    await asyncio.sleep(3)
    after = rss(pid)
    for ws in sessions:
        await ws.close()
    return before, after, len(sessions)


def run(binary, mode, count, work, port):
    tls = mode == "wss"
    env = dict(os.environ, RUST_LOG="warn")
    # Ended however the measurement ends (`finally` below), and sent SIGTERM by the kernel
    # should this script die (a SIGKILL included), so that no server is left on its port.
    server = subprocess.Popen(
        ["taskset", "-c", "0", binary, "--listen", f"127.0.0.1:{port}",
         "--config", str(config(work, tls))],
        env=env, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
    try:
        time.sleep(1.5)
        context = ssl.create_default_context(cafile=f"{work}/cert.pem") if tls else None
        before, after, opened = asyncio.run(
            measure(server.pid, f"{mode}://127.0.0.1:{port}/mcp", context, count))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()
    per_session = (after - before) / opened
    print(f"{mode}: {opened} sessions, {per_session:,.0f} B a session "
          f"(RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB)")
    return {"mode": mode, "sessions": opened, "bytes_per_session": round(per_session),
            "rss_before": before, "rss_after": after}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    modes = sys.argv[3:] or ["ws", "wss"]
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{work}/key.pem",
             "-out", f"{work}/cert.pem", "-days", "2", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True)
        results = [run(binary, mode, count, work, 18990 + n) for n, mode in enumerate(modes)]
    print("RESULT_JSON " + json.dumps({"mode": "session_memory", "results": results}))


if __name__ == "__main__":
    main()
