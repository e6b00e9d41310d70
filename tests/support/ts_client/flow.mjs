#!/usr/bin/env node
// The lab's ideal client flow, run by the official TypeScript MCP SDK over
// Streamable HTTP (the legacy initialize-based flow, protocol 2025-06-18/2025-11-25).
//
//   node flow.mjs <mcp-url> [--client-name NAME] [--timeout SECONDS] [--sdk current|2025-06-18]
//                 [--strict-transport]
//
// --sdk picks the installed SDK (see SDKS). --strict-transport fails the flow
// (exit 3) on any transport error the SDK reports, as Gemini CLI does: it marks
// the server disconnected on the first one.
//
// Prints one JSON object per line on stdout, one per step; on failure the last
// line is {"step":"error",...} and the exit code is 1 (2 when the
// notifications/resources/updated never came within the timeout).
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const URI = 'test://review/status';
// The installed SDKs (package.json): the current one, and an older one whose
// latest protocol is 2025-06-18 (the generation Gemini CLI and Codex speak).
const SDKS = {
  current: '@modelcontextprotocol/sdk',
  '2025-06-18': 'sdk-2025-06-18',
};

// The SDK's modules, and its version (its package.json is not in its "exports",
// so it is read from the install here).
async function loadSdk(pkg) {
  const { Client } = await import(`${pkg}/client/index.js`);
  const { StreamableHTTPClientTransport } = await import(`${pkg}/client/streamableHttp.js`);
  const { ResourceUpdatedNotificationSchema } = await import(`${pkg}/types.js`);
  const manifest = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  const version = JSON.parse(readFileSync(manifest, 'utf8')).version;
  return { Client, StreamableHTTPClientTransport, ResourceUpdatedNotificationSchema, version };
}

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
      sdk: { type: 'string', default: 'current' },
      'strict-transport': { type: 'boolean', default: false },
    },
  });
  if (positionals.length !== 1) {
    throw new FlowError(
      'usage: node flow.mjs <mcp-url> [--client-name NAME] [--timeout SECONDS] ' +
        '[--sdk current|2025-06-18] [--strict-transport]',
    );
  }
  if (!(values.sdk in SDKS)) throw new FlowError(`bad --sdk: ${values.sdk}`);
  const { Client, StreamableHTTPClientTransport, ResourceUpdatedNotificationSchema, version } =
    await loadSdk(SDKS[values.sdk]);
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
  const client = new Client({ name: values['client-name'], version });
  let closing = false;
  // Transport errors that do not fail a request (e.g. the GET stream breaking, an
  // SSE event it cannot parse) land here; they go to stderr so stdout stays one
  // JSON object per line. With --strict-transport the first one fails the flow.
  const transportError = deferred();
  transportError.promise.catch(() => {}); // handled where awaited
  let failed = null;
  client.onerror = (error) => {
    if (closing) return;
    process.stderr.write(`[sdk onerror] ${describe(error)}\n`);
    if (values['strict-transport']) {
      failed ??= new FlowError(`transport error: ${describe(error)}`, 3);
      transportError.reject(failed);
    }
  };
  // Each step races the first transport error (that promise never resolves, only rejects).
  const step = (promise) => Promise.race([promise, transportError.promise]);

  try {
    // 1. initialize (+ notifications/initialized, which starts the GET stream).
    await within(step(client.connect(transport)), timeoutMs, 'initialize timed out');
    const capabilities = client.getServerCapabilities() ?? {};
    emit({
      step: 'initialized',
      protocolVersion: transport.protocolVersion,
      sdk: `${SDKS[values.sdk]}@${version}`,
      sessionId: transport.sessionId,
      server: client.getServerVersion(),
      capabilities,
    });
    if (capabilities.resources?.subscribe !== true) {
      throw new FlowError('server does not advertise resources.subscribe');
    }

    // 2. resources/list
    const { resources } = await step(client.listResources(undefined, { timeout: timeoutMs }));
    const uris = resources.map((r) => r.uri);
    emit({ step: 'listed', uris });
    if (!uris.includes(URI)) throw new FlowError(`${URI} not listed`);

    // 3. resources/read: version 1
    const first = versionOf(await step(client.readResource({ uri: URI }, { timeout: timeoutMs })));
    emit({ step: 'read', ...first });
    if (first.version !== 1) throw new FlowError(`expected version 1, read ${first.version}`);

    // 4. handler first, then make sure the GET stream is open, then subscribe.
    const updated = deferred();
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
      if (notification.params.uri === URI) updated.resolve(notification.params);
    });
    const status = await within(step(getStream.promise), timeoutMs, 'GET stream not open in time');
    emit({ step: 'stream_open', status });
    await step(client.subscribeResource({ uri: URI }, { timeout: timeoutMs }));
    const subscribedAt = Date.now();
    emit({ step: 'subscribed', uri: URI });

    // 5. notifications/resources/updated on the GET stream, bounded.
    const params = await within(
      step(updated.promise),
      timeoutMs,
      `no notifications/resources/updated within ${values.timeout} s`,
      2,
    );
    emit({ step: 'notified', uri: params.uri, afterMs: Date.now() - subscribedAt });

    // 6. resources/read again: version 2
    const second = versionOf(await step(client.readResource({ uri: URI }, { timeout: timeoutMs })));
    emit({ step: 'read', ...second });
    if (second.version !== 2) throw new FlowError(`expected version 2, read ${second.version}`);

    // 7. unsubscribe, end the session (HTTP DELETE), close the transport.
    await step(client.unsubscribeResource({ uri: URI }, { timeout: timeoutMs }));
    if (failed) throw failed;
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
