// Interop client for protocol revision 2026-07-28: drives an mcp-ws server with
// the TypeScript MCP SDK 2.x client (@modelcontextprotocol/client), pinned to
// 2026-07-28, over its StreamableHTTPClientTransport: every request is a POST of
// its own, with the per-request `_meta` and no session.
//
// Usage: node client2026.mjs --transport http http://127.0.0.1:PORT/mcp
//
// Same output contract as ../client.mjs (one "ok NAME" / "FAIL NAME: reason"
// line per check, then "N passed, M failed"; "@registry ACTION" lines ask
// tests/it/support/interop.rs for a change) and the same fixtures. The check names
// are listed in tests/it/interop_ts_sdk.rs.

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { deepStrictEqual } from 'node:assert/strict';

const OVERALL_TIMEOUT_MS = 30_000;
const REQUEST_TIMEOUT_MS = 10_000;
const NOTIFICATION_TIMEOUT_MS = 10_000;
const VERSION = '2026-07-28';

const args = process.argv.slice(2);
if (args.length !== 3 || args[0] !== '--transport' || args[1] !== 'http') {
  console.error('usage: node client2026.mjs --transport http URL');
  process.exit(2);
}
const url = args[2];

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
  if (e instanceof ProtocolError) return oneLine(`ProtocolError code=${e.code}: ${e.message}`);
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

async function expectRpcError(promise, code) {
  let result;
  try {
    result = await promise;
  } catch (e) {
    assert(e instanceof ProtocolError, `expected ProtocolError ${code}, got ${describeError(e)}`);
    assert(e.code === code, `expected error code ${code}, got ${e.code} (${oneLine(e.message)})`);
    return;
  }
  throw new Error(`expected JSON-RPC error ${code}, but the request resolved with ${oneLine(JSON.stringify(result)).slice(0, 300)}`);
}

const opts = { timeout: REQUEST_TIMEOUT_MS };

function firstText(result) {
  const c = result?.content?.[0];
  assert(c && c.type === 'text', `content[0] is not a text item: ${JSON.stringify(c)}`);
  return c.text;
}

// Notifications from the listen stream, in arrival order.
class Notifications {
  constructor() {
    this.entries = [];
    this.wakers = new Set();
  }

  push(value) {
    this.entries.push(value);
    for (const wake of this.wakers) wake();
  }

  async next(waitingFor) {
    const deadline = Date.now() + NOTIFICATION_TIMEOUT_MS;
    for (;;) {
      if (this.entries.length > 0) return this.entries.shift();
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no notification within ${NOTIFICATION_TIMEOUT_MS} ms (${waitingFor})`);
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

  // The next `n` methods, sorted.
  async methods(n, waitingFor) {
    const methods = [];
    for (let i = 0; i < n; i++) methods.push((await this.next(waitingFor)).method);
    return methods.sort();
  }
}

const notifications = new Notifications();

function askRegistry(action) {
  console.log(`@registry ${action}`);
}

// Every HTTP exchange the transport makes: method, the JSON-RPC body it sent,
// the answer's status and session header.
const httpLog = [];
async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  let body;
  try {
    body = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
  } catch {
    body = undefined;
  }
  const headers = new Headers(init?.headers);
  httpLog.push({
    method: init?.method ?? 'GET',
    body,
    mcpMethod: headers.get('mcp-method'),
    mcpName: headers.get('mcp-name'),
    version: headers.get('mcp-protocol-version'),
    status: response.status,
    sessionId: response.headers.get('mcp-session-id'),
  });
  return response;
}

const ROOTS = [
  { uri: 'file:///interop/project', name: 'project' },
  { uri: 'file:///interop/docs', name: 'docs' },
];
const PROFILE = { name: 'Ada Lovelace', subscribe: true };
const MODEL = 'interop-model';
const asked = { roots: 0, sampling: [], elicitation: [] };

const client = new Client(
  { name: 'mcp-ws-interop-ts2', version: '0.1.0' },
  {
    capabilities: { roots: {}, sampling: {}, elicitation: { form: {} } },
    versionNegotiation: { mode: { pin: VERSION } },
  },
);
client.onerror = (e) => console.error(`[client error] ${describeError(e)}`);
client.setRequestHandler('roots/list', async () => {
  asked.roots += 1;
  return { roots: ROOTS };
});
client.setRequestHandler('sampling/createMessage', async (request) => {
  asked.sampling.push(request.params);
  const text = request.params.messages?.[0]?.content?.text;
  return {
    role: 'assistant',
    content: { type: 'text', text: `sampled: ${text}` },
    model: MODEL,
    stopReason: 'endTurn',
  };
});
client.setRequestHandler('elicitation/create', async (request) => {
  asked.elicitation.push(request.params);
  return { action: 'accept', content: PROFILE };
});
for (const method of [
  'notifications/tools/list_changed',
  'notifications/resources/list_changed',
  'notifications/prompts/list_changed',
]) {
  client.setNotificationHandler(method, () => notifications.push({ method }));
}
client.setNotificationHandler('notifications/resources/updated', (n) =>
  notifications.push({ method: 'notifications/resources/updated', uri: n.params.uri }));

const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch });

const connected = await check('connect pinned to 2026-07-28', async () => {
  await client.connect(transport, opts);
  assert(client.getProtocolEra() === 'modern', `era ${client.getProtocolEra()}`);
  const discover = httpLog.find((r) => r.body?.method === 'server/discover');
  assert(discover, 'no server/discover was sent');
  assert(!httpLog.some((r) => r.body?.method === 'initialize'), 'an initialize was sent');
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
  const missing = ['tools', 'resources', 'prompts', 'completions'].filter((k) => !caps[k]);
  assert(missing.length === 0, `capabilities missing ${missing.join(', ')}: ${JSON.stringify(caps)}`);
});

await check('tools/list', async () => {
  const { tools } = await client.listTools(undefined, opts);
  const names = tools.map((t) => t.name);
  const missing = ['echo', 'add', 'sleep', 'fail', 'ask_elicitation'].filter((n) => !names.includes(n));
  assert(missing.length === 0, `missing tools ${missing.join(', ')} (got ${names.join(', ')})`);
});

await check('tools/call echo, add, fail', async () => {
  const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello 2026' } }, opts);
  assert(!echo.isError && firstText(echo) === 'hello 2026', `echo: ${JSON.stringify(echo)}`);
  const add = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } }, opts);
  assert(!add.isError && Number(firstText(add)) === 42, `add: ${JSON.stringify(add)}`);
  const fail = await client.callTool({ name: 'fail', arguments: { message: 'boom' } }, opts);
  assert(fail.isError === true && firstText(fail).includes('boom'), `fail: ${JSON.stringify(fail)}`);
});

await check('tools/call sleep with progress', async () => {
  const progress = [];
  await client.callTool({ name: 'sleep', arguments: { ms: 300 } }, {
    ...opts,
    onprogress: (p) => progress.push(p.progress),
  });
  assert(progress.length >= 1, 'no progress notification received');
  for (let i = 1; i < progress.length; i++) {
    assert(progress[i] > progress[i - 1], `progress not strictly increasing: ${JSON.stringify(progress)}`);
  }
});

await check('tools/call unknown tool -> -32602', async () => {
  await expectRpcError(client.callTool({ name: 'no_such_tool_interop', arguments: {} }, opts), -32602);
});

// The POSTs of `tools/call NAME`, in order.
function callsOf(name) {
  return httpLog.filter((r) => r.body?.method === 'tools/call' && r.body.params?.name === name);
}

await check('input_required: elicitation answered, request retried with requestState', async () => {
  const message = 'Who are you?';
  const r = await client.callTool({ name: 'ask_elicitation', arguments: { message } }, opts);
  assert(!r.isError, `isError: ${firstText(r)}`);
  deepStrictEqual(JSON.parse(firstText(r)), { action: 'accept', content: PROFILE });
  assert(asked.elicitation.length === 1, `elicitation was asked ${asked.elicitation.length} times`);
  const params = asked.elicitation[0];
  assert(params.message === message, `message ${params.message}`);
  const props = params.requestedSchema?.properties;
  assert(props?.name?.type === 'string' && props?.subscribe?.type === 'boolean',
    `requestedSchema ${JSON.stringify(params.requestedSchema)}`);
  // Two rounds: the first without answers, the retry with the answer and the
  // server's requestState (and a new id).
  const posts = callsOf('ask_elicitation');
  assert(posts.length === 2, `${posts.length} POSTs of tools/call ask_elicitation`);
  const [first, retry] = posts;
  assert(first.body.params.inputResponses === undefined && first.body.params.requestState === undefined,
    `first round: ${JSON.stringify(first.body.params)}`);
  const answers = Object.values(retry.body.params.inputResponses ?? {});
  deepStrictEqual(answers, [{ action: 'accept', content: PROFILE }]);
  assert(typeof retry.body.params.requestState === 'string' && retry.body.params.requestState.length > 0,
    `retry without requestState: ${JSON.stringify(retry.body.params)}`);
  assert(retry.body.id !== first.body.id, 'the retry reused the request id');
});

await check('input_required: sampling and roots answered', async () => {
  const args = { prompt: 'What is 6 x 7?', maxTokens: 64, systemPrompt: 'Answer briefly.' };
  const s = await client.callTool({ name: 'ask_sampling', arguments: args }, opts);
  assert(!s.isError, `isError: ${firstText(s)}`);
  deepStrictEqual(JSON.parse(firstText(s)), {
    role: 'assistant', model: MODEL, text: `sampled: ${args.prompt}`, stopReason: 'endTurn',
  });
  assert(asked.sampling.length === 1, `sampling was asked ${asked.sampling.length} times`);
  deepStrictEqual(asked.sampling[0].messages, [{ role: 'user', content: { type: 'text', text: args.prompt } }]);
  const roots = await client.callTool({ name: 'ask_roots', arguments: {} }, opts);
  assert(!roots.isError, `isError: ${firstText(roots)}`);
  deepStrictEqual(JSON.parse(firstText(roots)), { roots: ROOTS });
  assert(asked.roots === 1, `roots/list was asked ${asked.roots} times`);
});

await check('resources/read', async () => {
  const { contents } = await client.readResource({ uri: 'mcp-ws://demo/readme' }, opts);
  const entry = contents.find((c) => c.uri === 'mcp-ws://demo/readme');
  assert(entry && entry.mimeType === 'text/markdown' && entry.text.startsWith('# mcp-ws demo'),
    `contents ${JSON.stringify(contents).slice(0, 300)}`);
});

await check('prompts/get greet', async () => {
  const r = await client.getPrompt({ name: 'greet', arguments: { name: 'Ada' } }, opts);
  const hit = r.messages.some((m) => m.content?.type === 'text' && m.content.text.includes('Ada'));
  assert(hit, `no message text contains 'Ada': ${JSON.stringify(r.messages).slice(0, 300)}`);
  await expectRpcError(client.getPrompt({ name: 'greet' }, opts), -32602);
});

// --- Changes, on a subscriptions/listen stream ---

const WATCHED_A = 'interop://watched/a';
const WATCHED_B = 'interop://watched/b';
const LIST_CHANGES = [
  'notifications/prompts/list_changed',
  'notifications/resources/list_changed',
  'notifications/tools/list_changed',
];
let subscription;

await check('subscriptions/listen acknowledged', async () => {
  const filter = {
    toolsListChanged: true,
    resourcesListChanged: true,
    promptsListChanged: true,
    resourceSubscriptions: [WATCHED_A],
  };
  subscription = await client.listen(filter, opts);
  deepStrictEqual(subscription.honoredFilter, filter);
});

await check('list_changed on the listen stream after additions and removals', async () => {
  assert(subscription, 'no subscription');
  askRegistry('add');
  deepStrictEqual(await notifications.methods(3, 'after add'), LIST_CHANGES);
  const { tools } = await client.listTools(undefined, opts);
  assert(tools.some((t) => t.name === 'interop_added'), `tools: ${tools.map((t) => t.name).join(', ')}`);
  const added = await client.callTool({ name: 'interop_added', arguments: {} }, opts);
  assert(firstText(added) === 'added at run time', `added: ${JSON.stringify(added)}`);
  askRegistry('remove');
  deepStrictEqual(await notifications.methods(3, 'after remove'), LIST_CHANGES);
  const after = await client.listTools(undefined, opts);
  assert(!after.tools.some((t) => t.name === 'interop_added'), 'interop_added still listed');
});

await check('resources/updated on the listen stream for the subscribed resource only', async () => {
  assert(subscription, 'no subscription');
  const updated = (uri) => ({ method: 'notifications/resources/updated', uri });
  askRegistry(`updated ${WATCHED_B}`);
  askRegistry(`updated ${WATCHED_A}`);
  deepStrictEqual(await notifications.next('an update'), updated(WATCHED_A));
  // A fence: the listen stream is one ordered stream, so an update of B sent
  // by mistake would have come before this second update of A.
  askRegistry(`updated ${WATCHED_A}`);
  deepStrictEqual(await notifications.next('the fence'), updated(WATCHED_A));
  deepStrictEqual(notifications.entries, []);
  await subscription.close();
  assert(await subscription.closed === 'local', 'closed otherwise');
});

await check('stateless: no session id, no GET, no DELETE; headers repeat the body', async () => {
  const withSession = httpLog.filter((r) => r.sessionId);
  assert(withSession.length === 0, `Mcp-Session-Id answered: ${JSON.stringify(withSession[0])}`);
  const methods = [...new Set(httpLog.map((r) => r.method))];
  deepStrictEqual(methods, ['POST']);
  for (const r of httpLog.filter((e) => e.body?.id !== undefined)) {
    assert(r.version === VERSION, `MCP-Protocol-Version ${r.version} on ${r.body.method}`);
    assert(r.mcpMethod === r.body.method, `Mcp-Method ${r.mcpMethod} on ${r.body.method}`);
    assert(r.body.params?._meta?.['io.modelcontextprotocol/protocolVersion'] === VERSION,
      `_meta without the version on ${r.body.method}`);
    assert(r.status === 200, `${r.body.method} answered HTTP ${r.status}`);
  }
  // The -32602s above are JSON-RPC errors answered with HTTP 200; the ones
  // the server refused on headers would be 400.
});

try {
  await client.close();
} catch (e) {
  console.error(`[close error] ${describeError(e)}`);
}

clearTimeout(overallTimer);
summaryAndExit(failed === 0 ? 0 : 1);
