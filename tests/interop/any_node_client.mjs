// Many sessions through a balancer, the TypeScript side: the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk 1.x) over Streamable HTTP, the same walk as any_node_client.py:
// each session does initialize, tools/list, a resource subscription, CALLS `echo` calls whose
// text is unique to the session and the call (an answer with anyone else's text is
// cross-talk), and DELETE at the end. Run by tests/it/three_nodes.rs against three mcp-ws
// nodes behind nginx (config/nginx-three-nodes.conf: round-robin, no affinity).
//
// Every call carries an idempotency key unique to the session and the call. A step that
// fails (its node died: the connection broke or nginx answered 502) is retried on the same
// session with the same key, with a growing pause, for up to RETRY_FOR_MS (counted in
// `retried`); a session that could not begin is begun again (counted in `restarts`). A step
// still failing after that is a failure. Why each retry or restart happened is counted in
// `retry_reasons`: the JSON-RPC error code ("-32008": the server's retryable refusal of a
// keyed call while Redis is away), the HTTP status of a refused request ("503"), or the
// error's name (a broken connection). HTTP refusals are also counted by status in
// `http_errors`. With MCP_TOKEN set, every request carries it as a bearer token.
//
// Usage: [MCP_TOKEN=bearer-token] node any_node_client.mjs URL SESSIONS CALLS
// Prints "ready N" once N sessions are initialized (every 10), then one JSON summary line.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const RETRY_FOR_MS = 30_000;
const [url, sessions, calls] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
if (!url || !(sessions > 0) || !(calls > 0)) {
  console.error('usage: node any_node_client.mjs URL SESSIONS CALLS');
  process.exit(2);
}

const results = {
  sessions_ok: 0,
  calls_ok: 0,
  retried: 0,
  restarts: 0,
  crosstalk: 0,
  failures: [],
  retry_reasons: {},
  http_errors: {},
};
const token = process.env.MCP_TOKEN;
const transportOptions = token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : {};

// Counts why a step failed (see the top of the file).
function noteFailure(e) {
  let reason = e?.name ?? 'error';
  if (e instanceof StreamableHTTPError && e.code !== undefined) {
    reason = String(e.code);
    results.http_errors[reason] = (results.http_errors[reason] ?? 0) + 1;
  } else if (typeof e?.code === 'number') {
    reason = String(e.code);
  }
  results.retry_reasons[reason] = (results.retry_reasons[reason] ?? 0) + 1;
}
let ready = 0;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const options = { timeout: 15_000 };

async function retrying(step) {
  const deadline = Date.now() + RETRY_FOR_MS;
  let pause = 100;
  for (;;) {
    try {
      return await step();
    } catch (e) {
      if (Date.now() + pause > deadline) throw e;
      noteFailure(e);
      results.retried += 1;
      await sleep(pause);
      pause = Math.min(pause * 2, 1_000);
    }
  }
}

async function runSession(index, state) {
  const client = new Client({ name: 'any-node-client-ts', version: '0.1.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), transportOptions);
  await client.connect(transport, options);
  try {
    state.initialized = true;
    ready += 1;
    if (ready % 10 === 0) console.log(`ready ${ready}`);
    const tools = (await retrying(() => client.listTools(undefined, options))).tools;
    if (!tools.some((t) => t.name === 'echo')) throw new Error(`no echo in ${tools.map((t) => t.name)}`);
    await retrying(() => client.subscribeResource({ uri: 'mcp-ws://demo/readme' }, options));
    for (let k = 0; k < calls; k += 1) {
      const text = `session ${index} call ${k}`;
      const result = await retrying(async () => {
        const r = await client.callTool(
          { name: 'echo', arguments: { text }, _meta: { idempotencyKey: `s${index}-c${k}` } },
          undefined,
          options,
        );
        if (r.isError) throw new Error(`tool error: ${r.content[0].text}`);
        return r;
      });
      const answer = result.content[0].text;
      if (answer !== text) {
        results.crosstalk += 1;
        throw new Error(`asked ${JSON.stringify(text)}, answered ${JSON.stringify(answer)}`);
      }
      results.calls_ok += 1;
      await sleep(20);
    }
    await retrying(() => transport.terminateSession());
  } finally {
    await client.close();
  }
}

async function oneSession(index) {
  try {
    const deadline = Date.now() + RETRY_FOR_MS;
    for (;;) {
      const state = { initialized: false };
      try {
        await runSession(index, state);
        break;
      } catch (e) {
        if (state.initialized || Date.now() > deadline) throw e;
        noteFailure(e);
        results.restarts += 1;
        await sleep(500);
      }
    }
    results.sessions_ok += 1;
  } catch (e) {
    results.failures.push(`session ${index}: ${String(e?.message ?? e)}`.slice(0, 300));
  }
}

await Promise.all(Array.from({ length: sessions }, (_, index) => oneSession(index)));
console.log(JSON.stringify(results));
process.exit(0);
