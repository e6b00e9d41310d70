// The Vercel AI SDK's MCP client (`createMCPClient` from @ai-sdk/mcp) used as its docs show an
// application: a client on an http transport config or its stdio transport, then listResources
// and readResource. It has no resources/subscribe and no hook for server notifications (one that
// arrives goes to onUncaughtError as "Unsupported message type"), so the program reads again
// after a bounded wait instead, and reports any such error.
//   node --experimental-import-meta-resolve vercel-ai-sdk.mjs BIN
// BIN is a program of the client file's install prefix (<prefix>/node_modules/.bin/X): the
// package is imported from that prefix (the pinned copy), resolved as an `import` in it would be.
// The lab is named by MCP_LAB_URL (http) or MCP_LAB_SERVER_COMMAND (stdio, started with sh -c).
import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';

const URI = 'test://review/status';
const WAIT_MS = 8000;
const PACKAGE = '@ai-sdk/mcp';
const prefix = pathToFileURL(`${dirname(dirname(dirname(process.argv[2])))}/`);
const load = (specifier) => import(import.meta.resolve(specifier, prefix));
const [{ createMCPClient }, { Experimental_StdioMCPTransport }] = await Promise.all([
  load(PACKAGE),
  load(`${PACKAGE}/mcp-stdio`),
]);
const manifest = new URL(`node_modules/${PACKAGE}/package.json`, prefix);
const { version } = JSON.parse(await readFile(manifest, 'utf8'));

const command = process.env.MCP_LAB_SERVER_COMMAND;
const transport = command
  ? new Experimental_StdioMCPTransport({ command: 'sh', args: ['-c', command] })
  : { type: 'http', url: process.env.MCP_LAB_URL };
const client = await createMCPClient({
  transport,
  onUncaughtError: (error) => console.log(`onUncaughtError: ${error?.message ?? error}`),
}).catch((error) => {
  console.log(`${PACKAGE} ${version}: could not connect: ${error?.message ?? error}`);
  process.exit(1);
});

const text = async () => (await client.readResource({ uri: URI })).contents[0].text;
console.log(`${PACKAGE} ${version} over ${command ? 'stdio' : 'http'}`);
const { resources } = await client.listResources();
console.log(`listed ${resources.length} resource(s)`);
console.log(`read: ${await text()}`);
console.log(`${PACKAGE} ${version}: no subscribe API, no notification hook; re-read after ${WAIT_MS / 1000} s`);
await new Promise((resolve) => setTimeout(resolve, WAIT_MS));
console.log(`re-read: ${await text()}`);
await client.close();
process.exit(0);
