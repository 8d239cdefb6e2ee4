// A server of the 2026-07-28 revision only, written with the official TypeScript SDK 2.x
// (`@modelcontextprotocol/server` 2.4.0: `createMcpHandler` with `legacy: 'reject'`). It
// refuses `initialize` with the unsupported-protocol-version error naming the revisions it
// serves. tests/it/gateway.rs puts it behind mcp-ws's gateway; nothing in it knows of mcp-ws.
//
// Tool: shout(text) → the text in capitals.
//
// Usage: node modern_only_server.mjs [METHODS_FILE]
// Prints "listening PORT" once it serves http://127.0.0.1:PORT/mcp, and appends the method
// of every JSON-RPC message it is sent to METHODS_FILE (one per line).
import { appendFileSync } from 'node:fs';
import http from 'node:http';
import { Readable } from 'node:stream';
import { McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { z } from 'zod';

const methodsFile = process.argv[2];

function factory() {
    const server = new McpServer({ name: 'modern-only', version: '1.0.0' });
    server.registerTool(
        'shout',
        { description: 'Says the text in capitals', inputSchema: z.object({ text: z.string() }) },
        async ({ text }) => ({ content: [{ type: 'text', text: text.toUpperCase() }] })
    );
    return server;
}

const handler = createMcpHandler(factory, { legacy: 'reject' });

// node:http in front of the handler's web-standard face.
const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    if (methodsFile && body.length > 0) {
        try {
            const message = JSON.parse(body.toString('utf8'));
            appendFileSync(methodsFile, `${message.method ?? 'response'}\n`);
        } catch {
            appendFileSync(methodsFile, 'not json\n');
        }
    }
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
        for (const one of [value].flat()) headers.append(name, one);
    }
    const request = new Request(`http://${req.headers.host}${req.url}`, {
        method: req.method,
        headers,
        body: body.length > 0 ? body : undefined
    });
    const response = await handler.fetch(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body) {
        Readable.fromWeb(response.body).pipe(res);
    } else {
        res.end();
    }
});

server.listen(0, '127.0.0.1', () => {
    console.log(`listening ${server.address().port}`);
});
