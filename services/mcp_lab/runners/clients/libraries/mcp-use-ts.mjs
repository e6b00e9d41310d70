// mcp-use (TypeScript, npm `mcp-use` 1.x) used as its README shows an application: an MCPClient
// from an `mcpServers` config, a session per server, session.on("notification", ...), then the
// session's listResources / readResource / subscribeToResource.
//   node --experimental-import-meta-resolve mcp-use-ts.mjs BIN
// BIN is a program of the client file's install prefix (<prefix>/node_modules/.bin/X): mcp-use is
// imported from that prefix (the pinned copy), resolved as an `import` in it would be.
// The lab is named by MCP_LAB_URL (http) or MCP_LAB_SERVER_COMMAND (stdio, started with sh -c).
import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';

const URI = 'test://review/status';
const WAIT_MS = 15000;
const PACKAGE = 'mcp-use';
const prefix = pathToFileURL(`${dirname(dirname(dirname(process.argv[2])))}/`);
// `mcp-use/client`, not the root: the root also loads MCPAgent, whose optional peer
// `langchain` an application that only uses the client does not install.
const { MCPClient } = await import(import.meta.resolve(`${PACKAGE}/client`, prefix));
const manifest = new URL(`node_modules/${PACKAGE}/package.json`, prefix);
const { version } = JSON.parse(await readFile(manifest, 'utf8'));

const command = process.env.MCP_LAB_SERVER_COMMAND;
const lab = command ? { command: 'sh', args: ['-c', command] } : { url: process.env.MCP_LAB_URL };
const client = new MCPClient({ mcpServers: { lab } });
const session = await client.createSession('lab');
let updated;
const arrived = new Promise((resolve) => (updated = resolve));
session.on('notification', (note) => {
  if (note.method === 'notifications/resources/updated' && note.params?.uri === URI) updated(true);
});

const text = async () => (await session.readResource(URI)).contents[0].text;
console.log(`${PACKAGE} ${version} over ${command ? 'stdio' : 'http'}`);
const { resources } = await session.listResources();
console.log(`listed ${resources.length} resource(s)`);
console.log(`read: ${await text()}`);
await session.subscribeToResource(URI);
console.log(`subscribed to ${URI}`);
let timer;
const late = new Promise((resolve) => (timer = setTimeout(() => resolve(false), WAIT_MS)));
const notified = await Promise.race([arrived, late]);
clearTimeout(timer);
console.log(notified ? 'notified: resources/updated' : `no notification in ${WAIT_MS / 1000} s`);
console.log(`re-read: ${await text()}`);
await client.closeAllSessions();
process.exit(notified ? 0 : 1);
