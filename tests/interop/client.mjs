// Interop client: drives an mcp-ws server with the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk, WebSocketClientTransport).
//
// Usage: node client.mjs ws://127.0.0.1:PORT/mcp
//
// Prints one line per check ("ok <name>" or "FAIL <name>: <reason>"), then a
// final line "N passed, M failed". Exits 0 only if nothing failed.

import { WebSocket } from 'ws';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { WebSocketClientTransport } from '@modelcontextprotocol/sdk/client/websocket.js';
import { McpError, ErrorCode } from '@modelcontextprotocol/sdk/types.js';

// The SDK transport does `new WebSocket(url, 'mcp')` against the global.
// Node 20 has no global WebSocket, so provide the `ws` one (also on newer
// Nodes, for identical behaviour everywhere).
Object.defineProperty(globalThis, 'WebSocket', {
  value: WebSocket,
  writable: true,
  configurable: true,
});

const OVERALL_TIMEOUT_MS = 30_000;
const REQUEST_TIMEOUT_MS = 10_000;

const url = process.argv[2];
if (!url) {
  console.error('usage: node client.mjs ws://127.0.0.1:PORT/mcp');
  process.exit(2);
}

let passed = 0;
let failed = 0;

function summaryAndExit(code) {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(code);
}

const overallTimer = setTimeout(() => {
  failed += 1;
  console.log(`FAIL overall-timeout: not finished within ${OVERALL_TIMEOUT_MS} ms`);
  summaryAndExit(3);
}, OVERALL_TIMEOUT_MS);

function oneLine(s) {
  return String(s).replace(/\s+/g, ' ').trim();
}

function describeError(e) {
  if (e instanceof McpError) return oneLine(`McpError code=${e.code}: ${e.message}`);
  if (e instanceof Error) {
    const code = e.code !== undefined ? ` (${e.code})` : '';
    return oneLine(`${e.name}${code}: ${e.message}`);
  }
  return oneLine(typeof e === 'object' ? JSON.stringify(e) : e);
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function check(name, fn) {
  try {
    await fn();
    passed += 1;
    console.log(`ok ${name}`);
    return true;
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${describeError(e)}`);
    return false;
  }
}

// Expect `promise` to reject with a JSON-RPC error carrying `code`.
async function expectRpcError(promise, code) {
  let result;
  try {
    result = await promise;
  } catch (e) {
    assert(e instanceof McpError, `expected McpError ${code}, got ${describeError(e)}`);
    assert(e.code === code, `expected error code ${code}, got ${e.code} (${oneLine(e.message)})`);
    return;
  }
  throw new Error(
    `expected JSON-RPC error ${code}, but request resolved with ${oneLine(JSON.stringify(result)).slice(0, 300)}`,
  );
}

const opts = { timeout: REQUEST_TIMEOUT_MS };

function firstText(result) {
  const c = result?.content?.[0];
  assert(c && c.type === 'text', `content[0] is not a text item: ${JSON.stringify(c)}`);
  return c.text;
}

const client = new Client({ name: 'mcp-ws-interop', version: '0.1.0' });
client.onerror = (e) => console.error(`[client error] ${describeError(e)}`);
const transport = new WebSocketClientTransport(new URL(url));

const connected = await check('connect', async () => {
  await client.connect(transport, opts);
});
if (!connected) {
  clearTimeout(overallTimer);
  summaryAndExit(1);
}

await check('server-info', async () => {
  const info = client.getServerVersion();
  assert(info && typeof info.name === 'string' && info.name.length > 0,
    `serverInfo has no name: ${JSON.stringify(info)}`);
  const caps = client.getServerCapabilities() ?? {};
  const missing = ['tools', 'resources', 'prompts', 'logging'].filter((k) => !caps[k]);
  assert(missing.length === 0,
    `capabilities missing ${missing.join(', ')}: ${JSON.stringify(caps)}`);
});

await check('tools/list', async () => {
  const { tools } = await client.listTools(undefined, opts);
  const names = tools.map((t) => t.name);
  const missing = ['echo', 'add', 'sleep', 'fail'].filter((n) => !names.includes(n));
  assert(missing.length === 0, `missing tools ${missing.join(', ')} (got ${names.join(', ')})`);
});

await check('tools/call echo', async () => {
  const r = await client.callTool({ name: 'echo', arguments: { text: 'hello interop' } }, undefined, opts);
  assert(!r.isError, `isError is ${r.isError}`);
  const c = r.content?.[0];
  assert(c && c.type === 'text' && c.text === 'hello interop',
    `content[0] = ${JSON.stringify(c)}`);
});

await check('tools/call add', async () => {
  const r = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } }, undefined, opts);
  assert(!r.isError, `isError is ${r.isError}`);
  const text = firstText(r);
  assert(Number(text.trim()) === 42 && text.trim() !== '', `expected 42, got ${JSON.stringify(text)}`);
});

await check('tools/call fail', async () => {
  const r = await client.callTool({ name: 'fail', arguments: { message: 'boom' } }, undefined, opts);
  assert(r.isError === true, `isError is ${r.isError}`);
  const text = firstText(r);
  assert(text.includes('boom'), `text does not contain 'boom': ${JSON.stringify(text)}`);
});

await check('tools/call sleep with progress', async () => {
  const progress = [];
  await client.callTool({ name: 'sleep', arguments: { ms: 300 } }, undefined, {
    ...opts,
    onprogress: (p) => progress.push(p.progress),
  });
  assert(progress.length >= 1, 'no progress notification received');
  for (let i = 1; i < progress.length; i++) {
    assert(progress[i] > progress[i - 1],
      `progress not strictly increasing: ${JSON.stringify(progress)}`);
  }
});

await check('resources/list + resources/read', async () => {
  const { resources } = await client.listResources(undefined, opts);
  assert(resources.length >= 1, 'no resources listed');
  const uri = resources[0].uri;
  const { contents } = await client.readResource({ uri }, opts);
  assert(Array.isArray(contents) && contents.some((c) => c.uri === uri),
    `no content entry with uri ${uri}: ${JSON.stringify(contents).slice(0, 300)}`);
});

await check('prompts/list + prompts/get greet', async () => {
  const { prompts } = await client.listPrompts(undefined, opts);
  const names = prompts.map((p) => p.name);
  assert(names.includes('greet'), `no 'greet' prompt (got ${names.join(', ')})`);
  const r = await client.getPrompt({ name: 'greet', arguments: { name: 'Ada' } }, opts);
  const hit = r.messages.some((m) => m.content?.type === 'text' && m.content.text.includes('Ada'));
  assert(hit, `no message text contains 'Ada': ${JSON.stringify(r.messages).slice(0, 300)}`);
});

await check('prompts/get greet missing argument -> -32602', async () => {
  await expectRpcError(client.getPrompt({ name: 'greet' }, opts), ErrorCode.InvalidParams);
});

await check('tools/call unknown tool -> -32602', async () => {
  await expectRpcError(
    client.callTool({ name: 'no_such_tool_interop', arguments: {} }, undefined, opts),
    ErrorCode.InvalidParams,
  );
});

await check('ping', async () => {
  await client.ping(opts);
});

await check('logging/setLevel debug', async () => {
  await client.setLoggingLevel('debug', opts);
});

try {
  await client.close();
} catch (e) {
  console.error(`[close error] ${describeError(e)}`);
}

clearTimeout(overallTimer);
summaryAndExit(failed === 0 ? 0 : 1);
