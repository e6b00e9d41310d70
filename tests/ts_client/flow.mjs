#!/usr/bin/env node
// The lab's ideal client flow, run by the official TypeScript MCP SDK over
// Streamable HTTP (the legacy initialize-based flow, protocol 2025-06-18/2025-11-25).
//
//   node flow.mjs <mcp-url> [--client-name NAME] [--timeout SECONDS]
//
// Prints one JSON object per line on stdout, one per step; on failure the last
// line is {"step":"error",...} and the exit code is 1 (2 when the
// notifications/resources/updated never came within the timeout).
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const URI = 'test://review/status';
// The SDK's package.json is not in its "exports", so read it from the install here.
const SDK_VERSION = JSON.parse(
  readFileSync(new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url), 'utf8'),
).version;

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

class FlowError extends Error {
  constructor(message, exitCode = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}

// A promise with its resolve/reject exposed (Promise.withResolvers is Node 22+).
function deferred() {
  let resolve, reject;
  const promise = new Promise((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

// Rejects with FlowError(message, exitCode) unless `promise` settles within `ms`.
function within(promise, ms, message, exitCode = 1) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new FlowError(message, exitCode)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// fetch's own errors say only "fetch failed"; the reason (ECONNREFUSED...) is in .cause.
function describe(error) {
  const cause = error?.cause ? ` (${error.cause.code ?? error.cause.message ?? error.cause})` : '';
  return `${error?.message ?? error}${cause}`;
}

function versionOf(result) {
  const text = result.contents.map((c) => c.text ?? '').join('');
  const match = /^version:\s*(\d+)\s*$/m.exec(text);
  return { version: match ? Number(match[1]) : null, text };
}

async function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      'client-name': { type: 'string', default: 'ts-sdk-client' },
      timeout: { type: 'string', default: '20' },
    },
  });
  if (positionals.length !== 1) {
    throw new FlowError('usage: node flow.mjs <mcp-url> [--client-name NAME] [--timeout SECONDS]');
  }
  const url = new URL(positionals[0]);
  const timeoutMs = Number(values.timeout) * 1000;
  if (!(timeoutMs > 0)) throw new FlowError(`bad --timeout: ${values.timeout}`);

  // The GET stream race. After `notifications/initialized` is accepted (202), the
  // SDK's transport opens the standalone GET SSE stream fire-and-forget
  // (`this._startOrAuthSse(...).catch(...)`, not awaited), so `client.connect()`
  // resolves before that stream exists, and the SDK offers no event for it. A
  // notification sent while it is not open is dropped by the server. The transport
  // takes a custom `fetch`, so we watch that GET's response instead: a 200 means the
  // server has started the SSE response (the lab logs [stream/open] at that very
  // moment), and we subscribe only after it. Anything else (405: the server offers
  // no GET stream; an error) fails the flow, since no notification could arrive;
  // a redirect is left to the SDK, which may follow it with another GET.
  const getStream = deferred();
  const watchingFetch = async (input, init) => {
    const isGet = (init?.method ?? 'GET').toUpperCase() === 'GET';
    try {
      const response = await fetch(input, init);
      const redirect = response.status >= 300 && response.status < 400;
      if (isGet && response.ok) getStream.resolve(response.status);
      else if (isGet && !redirect) {
        getStream.reject(new FlowError(`GET stream refused: HTTP ${response.status}`));
      }
      return response;
    } catch (error) {
      if (isGet) getStream.reject(new FlowError(`GET stream failed: ${error.message}`));
      throw error;
    }
  };
  getStream.promise.catch(() => {}); // handled where awaited

  const transport = new StreamableHTTPClientTransport(url, { fetch: watchingFetch });
  const client = new Client({ name: values['client-name'], version: SDK_VERSION });
  let closing = false;
  // Transport errors that do not fail a request (e.g. the GET stream breaking) land
  // here; they go to stderr so stdout stays one JSON object per line.
  client.onerror = (error) => {
    if (!closing) process.stderr.write(`[sdk onerror] ${describe(error)}\n`);
  };

  try {
    // 1. initialize (+ notifications/initialized, which starts the GET stream).
    await within(client.connect(transport), timeoutMs, 'initialize timed out');
    const capabilities = client.getServerCapabilities() ?? {};
    emit({
      step: 'initialized',
      protocolVersion: transport.protocolVersion,
      sessionId: transport.sessionId,
      server: client.getServerVersion(),
      capabilities,
    });
    if (capabilities.resources?.subscribe !== true) {
      throw new FlowError('server does not advertise resources.subscribe');
    }

    // 2. resources/list
    const { resources } = await client.listResources(undefined, { timeout: timeoutMs });
    const uris = resources.map((r) => r.uri);
    emit({ step: 'listed', uris });
    if (!uris.includes(URI)) throw new FlowError(`${URI} not listed`);

    // 3. resources/read: version 1
    const first = versionOf(await client.readResource({ uri: URI }, { timeout: timeoutMs }));
    emit({ step: 'read', ...first });
    if (first.version !== 1) throw new FlowError(`expected version 1, read ${first.version}`);

    // 4. handler first, then make sure the GET stream is open, then subscribe.
    const updated = deferred();
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
      if (notification.params.uri === URI) updated.resolve(notification.params);
    });
    const status = await within(getStream.promise, timeoutMs, 'GET stream not open in time');
    emit({ step: 'stream_open', status });
    await client.subscribeResource({ uri: URI }, { timeout: timeoutMs });
    const subscribedAt = Date.now();
    emit({ step: 'subscribed', uri: URI });

    // 5. notifications/resources/updated on the GET stream, bounded.
    const params = await within(
      updated.promise,
      timeoutMs,
      `no notifications/resources/updated within ${values.timeout} s`,
      2,
    );
    emit({ step: 'notified', uri: params.uri, afterMs: Date.now() - subscribedAt });

    // 6. resources/read again: version 2
    const second = versionOf(await client.readResource({ uri: URI }, { timeout: timeoutMs }));
    emit({ step: 'read', ...second });
    if (second.version !== 2) throw new FlowError(`expected version 2, read ${second.version}`);

    // 7. unsubscribe, end the session (HTTP DELETE), close the transport.
    await client.unsubscribeResource({ uri: URI }, { timeout: timeoutMs });
    emit({ step: 'unsubscribed', uri: URI });
    closing = true;
    await transport.terminateSession(); // client.close() alone does not send DELETE
    await client.close();
    emit({ step: 'done', ok: true });
    return 0;
  } catch (error) {
    emit({ step: 'error', message: describe(error) });
    closing = true;
    // Best effort: end the session on the server too, without hanging on it.
    await within(transport.terminateSession(), 2000, 'DELETE timed out').catch(() => {});
    await client.close().catch(() => {});
    return error instanceof FlowError ? error.exitCode : 1;
  }
}

main().then(
  (code) => process.exit(code),
  (error) => {
    // Only argument errors get here (before any connection).
    emit({ step: 'error', message: describe(error) });
    process.exit(error instanceof FlowError ? error.exitCode : 1);
  },
);
