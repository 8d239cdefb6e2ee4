// Interop client: drives an mcp-ws server with the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk), over WebSocket (WebSocketClientTransport) or
// Streamable HTTP (StreamableHTTPClientTransport, a 2025-11-25 session).
//
// Usage: node client.mjs [--transport ws|http] URL
//   node client.mjs --transport ws ws://127.0.0.1:PORT/mcp     (the default)
//   node client.mjs --transport http http://127.0.0.1:PORT/mcp
//
// Over HTTP the same checks run, plus two of the transport's own: the GET
// stream (which carries the list changes and resource updates, the client
// being idle) opens, and DELETE ends the session (its id is then unknown).
//
// Prints one line per check ("ok <name>" or "FAIL <name>: <reason>"), then a
// final line "N passed, M failed". Exits 0 only if nothing failed.
//
// Some checks need the server's owner to change something while this client is
// connected: the client prints "@registry <action>" and tests/it/support/interop.rs
// makes the change (see there), then the client waits for the notifications the
// change must cause. The check names and the fixtures (ask_* tools, the watched
// resources, what "@registry add" adds) are the ones of harness.rs, and the same
// as in client.py.

import { WebSocket } from 'ws';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { WebSocketClientTransport } from '@modelcontextprotocol/sdk/client/websocket.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ErrorCode,
  ListRootsRequestSchema,
  McpError,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { deepStrictEqual } from 'node:assert/strict';

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
// How long to wait for a notification the server must send.
const NOTIFICATION_TIMEOUT_MS = 10_000;

const USAGE = 'usage: node client.mjs [--transport ws|http] URL';
const args = process.argv.slice(2);
let transportKind = 'ws';
if (args[0] === '--transport') {
  transportKind = args[1];
  args.splice(0, 2);
}
const url = args[0];
if (!url || args.length !== 1 || !['ws', 'http'].includes(transportKind)) {
  console.error(USAGE);
  process.exit(2);
}
const overHttp = transportKind === 'http';

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

// What the server sent on its own (list changes, resource updates), in arrival
// order. Each waiter takes the oldest entry of its kind not taken yet.
class Notifications {
  constructor() {
    this.entries = [];
    this.wakers = new Set();
  }

  push(kind, value) {
    this.entries.push({ kind, value, taken: false });
    for (const wake of this.wakers) wake();
  }

  // The oldest entry of `kind` not taken yet, waiting for it if needed.
  async next(kind) {
    const deadline = Date.now() + NOTIFICATION_TIMEOUT_MS;
    for (;;) {
      const entry = this.entries.find((e) => e.kind === kind && !e.taken);
      if (entry) {
        entry.taken = true;
        return entry.value;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${kind} notification within ${NOTIFICATION_TIMEOUT_MS} ms`);
      await new Promise((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.wakers.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, left);
        this.wakers.add(wake);
      });
    }
  }

  // Entries of `kind` nobody took.
  untaken(kind) {
    return this.entries.filter((e) => e.kind === kind && !e.taken).map((e) => e.value);
  }
}

const notifications = new Notifications();

// Asks the test that owns the server for a change (tests/it/support/interop.rs).
function askRegistry(action) {
  console.log(`@registry ${action}`);
}

// What the client answers to the server's requests, and what it was asked.
const ROOTS = [
  { uri: 'file:///interop/project', name: 'project' },
  { uri: 'file:///interop/docs', name: 'docs' },
];
const PROFILE = { name: 'Ada Lovelace', subscribe: true };
const MODEL = 'interop-model';
const asked = { roots: 0, sampling: [], elicitation: [] };

const onListChanged = (kind) => ({
  autoRefresh: true,
  debounceMs: 0,
  onChanged: (error, items) => notifications.push(kind, { error, items }),
});

const client = new Client(
  { name: 'mcp-ws-interop', version: '0.1.0' },
  {
    capabilities: { roots: { listChanged: true }, sampling: {}, elicitation: { form: {} } },
    // The SDK's own list_changed handling: it re-lists on each notification.
    listChanged: {
      tools: onListChanged('tools'),
      resources: onListChanged('resources'),
      prompts: onListChanged('prompts'),
    },
  },
);
client.onerror = (e) => console.error(`[client error] ${describeError(e)}`);
client.setRequestHandler(ListRootsRequestSchema, async () => {
  asked.roots += 1;
  return { roots: ROOTS };
});
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  asked.sampling.push(request.params);
  const text = request.params.messages?.[0]?.content?.text;
  return {
    role: 'assistant',
    content: { type: 'text', text: `sampled: ${text}` },
    model: MODEL,
    stopReason: 'endTurn',
  };
});
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.elicitation.push(request.params);
  return { action: 'accept', content: PROFILE };
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
  notifications.push('updated', notification.params.uri);
});
// Over HTTP: every request the transport makes, with its answer's status and
// type, and the first GET (the session's stream) once its answer arrives.
const httpLog = [];
let getStreamOpened;
const getStreamAnswered = new Promise((resolve) => {
  getStreamOpened = resolve;
});
async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const method = init?.method ?? 'GET';
  httpLog.push({ method, status: response.status, type: response.headers.get('content-type') });
  if (method === 'GET') getStreamOpened(response);
  return response;
}

const transport = overHttp
  ? new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch })
  : new WebSocketClientTransport(new URL(url));

const connected = await check('connect', async () => {
  await client.connect(transport, opts);
});
if (!connected) {
  clearTimeout(overallTimer);
  summaryAndExit(1);
}

if (overHttp) {
  // The SDK opens it after `notifications/initialized`, on its own time; what
  // the server sends the session before it is open is not for this client.
  // The checks below that wait for list changes and updates need it open.
  await check('GET stream opened', async () => {
    const timeout = new Promise((_, reject) =>
      setTimeout(() => reject(new Error(`no GET answered within ${REQUEST_TIMEOUT_MS} ms`)), REQUEST_TIMEOUT_MS));
    const response = await Promise.race([getStreamAnswered, timeout]);
    assert(response.status === 200, `GET answered ${response.status}`);
    const type = response.headers.get('content-type') ?? '';
    assert(type.startsWith('text/event-stream'), `GET answered content-type ${type}`);
  });
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

// --- Requests from the server, made from inside a tool ---

// The JSON a tool answered with, after checking it did not fail.
async function callForJson(name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, opts);
  const text = firstText(r);
  assert(!r.isError, `isError is ${r.isError}: ${text}`);
  return JSON.parse(text);
}

await check('roots/list answered inside a tool', async () => {
  const answered = await callForJson('ask_roots', {});
  assert(asked.roots === 1, `roots/list was asked ${asked.roots} times`);
  deepStrictEqual(answered, { roots: ROOTS });
});

await check('sampling/createMessage answered inside a tool', async () => {
  const args = { prompt: 'What is 6 x 7?', maxTokens: 64, systemPrompt: 'Answer briefly.' };
  const answered = await callForJson('ask_sampling', args);
  assert(asked.sampling.length === 1, `sampling was asked ${asked.sampling.length} times`);
  const params = asked.sampling[0];
  deepStrictEqual(params.messages, [{ role: 'user', content: { type: 'text', text: args.prompt } }]);
  assert(params.maxTokens === args.maxTokens, `maxTokens ${params.maxTokens}`);
  assert(params.systemPrompt === args.systemPrompt, `systemPrompt ${params.systemPrompt}`);
  deepStrictEqual(answered, {
    role: 'assistant',
    model: MODEL,
    text: `sampled: ${args.prompt}`,
    stopReason: 'endTurn',
  });
});

await check('elicitation/create answered inside a tool', async () => {
  const message = 'Who are you?';
  const answered = await callForJson('ask_elicitation', { message });
  assert(asked.elicitation.length === 1, `elicitation was asked ${asked.elicitation.length} times`);
  const params = asked.elicitation[0];
  assert(params.mode === 'form', `mode ${params.mode}`);
  assert(params.message === message, `message ${params.message}`);
  const schema = params.requestedSchema;
  assert(schema?.type === 'object', `requestedSchema ${JSON.stringify(schema)}`);
  assert(schema.properties?.name?.type === 'string' && schema.properties?.subscribe?.type === 'boolean',
    `requestedSchema properties ${JSON.stringify(schema.properties)}`);
  deepStrictEqual(answered, { action: 'accept', content: PROFILE });
});

// --- Registry changes while connected (and idle) ---

const ADDED = { tools: 'interop_added', resources: 'interop://added', prompts: 'interop_added' };
const keyOf = { tools: (t) => t.name, resources: (r) => r.uri, prompts: (p) => p.name };

// The next list change of `kind`, with the list the SDK fetched on it. The
// server must declare it sends them (the SDK listens only then).
async function nextListChange(kind) {
  const declared = client.getServerCapabilities()?.[kind]?.listChanged;
  assert(declared === true, `capabilities.${kind}.listChanged is ${declared}`);
  const { error, items } = await notifications.next(kind);
  if (error) throw error;
  assert(Array.isArray(items), `the SDK re-listed ${kind} with no items: ${JSON.stringify(items)}`);
  return items.map(keyOf[kind]);
}

askRegistry('add');

await check('tools/list_changed after a tool is added', async () => {
  const names = await nextListChange('tools');
  assert(names.includes(ADDED.tools), `tools now: ${names.join(', ')}`);
});

await check('resources/list_changed after a resource is added', async () => {
  const uris = await nextListChange('resources');
  assert(uris.includes(ADDED.resources), `resources now: ${uris.join(', ')}`);
});

await check('prompts/list_changed after a prompt is added', async () => {
  const names = await nextListChange('prompts');
  assert(names.includes(ADDED.prompts), `prompts now: ${names.join(', ')}`);
});

await check('tools/call a tool added at run time', async () => {
  const r = await client.callTool({ name: ADDED.tools, arguments: {} }, undefined, opts);
  assert(!r.isError, `isError is ${r.isError}`);
  const text = firstText(r);
  assert(text === 'added at run time', `text ${JSON.stringify(text)}`);
});

askRegistry('remove');

await check('list_changed for each list after the additions are removed', async () => {
  for (const kind of ['tools', 'resources', 'prompts']) {
    const keys = await nextListChange(kind);
    assert(!keys.includes(ADDED[kind]), `${kind} still has ${ADDED[kind]}`);
  }
});

// --- Resource subscriptions ---

const WATCHED_A = 'interop://watched/a';
const WATCHED_B = 'interop://watched/b';

// Asks for updates of `quiet` then `loud` (published in that order), waits for
// the one of `loud`, then asks for `loud` again and waits for that one too: the
// server sends what is not part of a request on one ordered stream (the socket,
// or the GET stream), so had it sent one for `quiet`, published before, it
// would have come before this fence. (A ping's answer is no fence over HTTP: it
// comes back on another connection.)
async function expectUpdateOfOnly(loud, quiet) {
  askRegistry(`updated ${quiet}`);
  askRegistry(`updated ${loud}`);
  const uri = await notifications.next('updated');
  assert(uri === loud, `resources/updated for ${uri}, expected ${loud}`);
  askRegistry(`updated ${loud}`);
  const fence = await notifications.next('updated');
  assert(fence === loud, `resources/updated for ${fence}, expected ${loud} again`);
  const extra = notifications.untaken('updated');
  assert(extra.length === 0, `resources/updated also for ${extra.join(', ')}`);
}

await check('resources/updated for a subscribed resource only', async () => {
  const declared = client.getServerCapabilities()?.resources?.subscribe;
  assert(declared === true, `capabilities.resources.subscribe is ${declared}`);
  await client.subscribeResource({ uri: WATCHED_A }, opts);
  await expectUpdateOfOnly(WATCHED_A, WATCHED_B);
});

await check('resources/unsubscribe stops its updates', async () => {
  await client.unsubscribeResource({ uri: WATCHED_A }, opts);
  await client.subscribeResource({ uri: WATCHED_B }, opts);
  await expectUpdateOfOnly(WATCHED_B, WATCHED_A);
});

async function closeClient() {
  try {
    await client.close();
  } catch (e) {
    console.error(`[close error] ${describeError(e)}`);
  }
}

if (overHttp) {
  await check('session ended with DELETE (its id is then unknown: 404)', async () => {
    const id = transport.sessionId;
    assert(typeof id === 'string' && id.length > 0, `no session id: ${id}`);
    await transport.terminateSession();
    // The SDK takes 405 (termination not supported) as success too.
    const deletes = httpLog.filter((r) => r.method === 'DELETE').map((r) => r.status);
    deepStrictEqual(deletes, [200]);
    assert(transport.sessionId === undefined, 'the SDK still holds the session id');
    // Closed before the GET stream, ended by the server, would be retried.
    await closeClient();
    const response = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': id,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'after-delete', method: 'ping' }),
    });
    await response.body?.cancel();
    assert(response.status === 404, `a POST with the ended session's id got ${response.status}`);
  });
} else {
  await closeClient();
}

clearTimeout(overallTimer);
summaryAndExit(failed === 0 ? 0 : 1);
