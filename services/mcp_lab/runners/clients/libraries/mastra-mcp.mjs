// Mastra's MCP client (@mastra/mcp) used as its docs show an application: an MCPClient with a
// `servers` map, then mcp.resources.list / read, mcp.resources.onUpdated(server, handler) and
// mcp.resources.subscribe(server, uri), and a read again once the update arrives.
//   node --experimental-import-meta-resolve mastra-mcp.mjs BIN
// BIN is a program of the client file's install prefix (<prefix>/node_modules/.bin/X): the
// package is imported from that prefix (the pinned copy), resolved as an `import` in it would be.
// The lab is named by MCP_LAB_URL (http) or MCP_LAB_SERVER_COMMAND (stdio, started with sh -c).
import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';

const URI = 'test://review/status';
const WAIT_MS = 15000;
const PACKAGE = '@mastra/mcp';
const prefix = pathToFileURL(`${dirname(dirname(dirname(process.argv[2])))}/`);
const { MCPClient } = await import(import.meta.resolve(PACKAGE, prefix));
const manifest = new URL(`node_modules/${PACKAGE}/package.json`, prefix);
const { version } = JSON.parse(await readFile(manifest, 'utf8'));

const command = process.env.MCP_LAB_SERVER_COMMAND;
const lab = command
  ? { command: 'sh', args: ['-c', command] }
  : { url: new URL(process.env.MCP_LAB_URL) };
// Mastra sends the key of `servers` as its clientInfo name (version 1.0.0): "mastra" here.
const SERVER = 'mastra';
const mcp = new MCPClient({ id: 'mcp-lab', servers: { [SERVER]: lab } });
let updated;
const arrived = new Promise((resolve) => (updated = resolve));

const text = async () => (await mcp.resources.read(SERVER, URI)).contents[0].text;
console.log(`${PACKAGE} ${version} over ${command ? 'stdio' : 'http'}`);
const listed = await mcp.resources.list();
console.log(`listed ${(listed[SERVER] ?? []).length} resource(s)`);
console.log(`read: ${await text()}`);
await mcp.resources.onUpdated(SERVER, ({ uri }) => uri === URI && updated(true));
await mcp.resources.subscribe(SERVER, URI);
console.log(`subscribed to ${URI}`);
let timer;
const late = new Promise((resolve) => (timer = setTimeout(() => resolve(false), WAIT_MS)));
const notified = await Promise.race([arrived, late]);
clearTimeout(timer);
console.log(notified ? 'notified: resources/updated' : `no notification in ${WAIT_MS / 1000} s`);
console.log(`re-read: ${await text()}`);
await mcp.disconnect();
process.exit(notified ? 0 : 1);
