// Gateway client: the official TypeScript MCP SDK (@modelcontextprotocol/sdk 1.x) drives
// mcp-ws serving the upstreams of tests/it/gateway.rs (`py`: FastMCP over stdio, one child
// per session; `every`: server-everything over stdio, shared), over WebSocket or Streamable
// HTTP.
//
// Usage: node gateway_client.mjs --transport ws|http URL
// Prints "ok <name>" or "FAIL <name>: <reason>" per check, then "N passed, M failed".

import { WebSocket } from 'ws';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { WebSocketClientTransport } from '@modelcontextprotocol/sdk/client/websocket.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { deepStrictEqual, ok, strictEqual } from 'node:assert/strict';

Object.defineProperty(globalThis, 'WebSocket', { value: WebSocket, configurable: true, writable: true });

const [flag, transportName, url] = process.argv.slice(2);
if (flag !== '--transport' || !['ws', 'http'].includes(transportName) || !url) {
  console.error('usage: node gateway_client.mjs --transport ws|http URL');
  process.exit(2);
}

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed += 1;
    console.log(`ok ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${String(e?.message ?? e).split('\n').join(' ')}`);
  }
}
const textOf = (result) => result.content[0].text;

const client = new Client({ name: 'gateway-client-ts', version: '0.1.0' }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'Grace' } }));
const transport = transportName === 'ws'
  ? new WebSocketClientTransport(new URL(url))
  : new StreamableHTTPClientTransport(new URL(url));
client.onerror = (e) => console.error(`[client error] ${e}`);
await client.connect(transport);

await check('tools of both upstreams listed under their prefixes', async () => {
  const names = new Set((await client.listTools()).tools.map((t) => t.name));
  for (const name of ['py__add', 'py__slow', 'every__echo']) ok(names.has(name), `${name} missing`);
});
await check('a call and its structured content pass through', async () => {
  const result = await client.callTool({ name: 'py__add', arguments: { a: 1.5, b: 2 } });
  deepStrictEqual(result.structuredContent, { sum: 3.5 });
});
await check('server-everything answers through the shared child', async () => {
  strictEqual(textOf(await client.callTool({ name: 'every__echo', arguments: { message: 'ts' } })), 'Echo: ts');
});
await check('upstream progress reaches the client under its own token', async () => {
  const seen = [];
  // The SDK handles a notification in a microtask but a response at once: a last progress
  // that arrives in the same read as the response (the upstream writes them back to back)
  // is reported as for an unknown token although it was sent first. The tool waits after
  // its last step so that the two arrive apart; the wire order itself is checked by
  // tests/it/gateway.rs (progress before the response, under the client's token).
  const result = await client.callTool({ name: 'py__slow', arguments: { steps: 3, delay_ms: 100, pause_after_ms: 100 } }, undefined, {
    onprogress: (p) => seen.push(p.progress),
  });
  strictEqual(textOf(result), 'done');
  deepStrictEqual(seen, [1, 2, 3]);
});
await check("an upstream's elicitation reaches the client and back", async () => {
  strictEqual(textOf(await client.callTool({ name: 'py__ask_name', arguments: {} })), 'hello Grace');
});
await check('a crashed child answers -32030', async () => {
  try {
    await client.callTool({ name: 'py__crash', arguments: {} });
    throw new Error('the crash was answered with a result');
  } catch (e) {
    ok(e instanceof McpError, String(e));
    strictEqual(e.code, -32030);
  }
  ok(textOf(await client.callTool({ name: 'py__whoami', arguments: {} })).startsWith('pid='));
});

await client.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
