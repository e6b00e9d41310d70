// The MCP TypeScript SDK (@modelcontextprotocol/sdk) used as its README shows an application:
// a Client on a transport, a notification handler for ResourceUpdatedNotificationSchema,
// subscribeResource, and readResource again once the update arrives.
//   node --experimental-import-meta-resolve typescript-sdk.mjs BIN
// BIN is a program of the client file's install prefix (<prefix>/node_modules/.bin/X): the SDK
// is imported from that prefix (the pinned copy), resolved as an `import` in it would be.
// The lab is named by MCP_LAB_URL (http) or MCP_LAB_SERVER_COMMAND (stdio, started with sh -c).
import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';

const URI = 'test://review/status';
const WAIT_MS = 15000;
const PACKAGE = '@modelcontextprotocol/sdk';
const prefix = pathToFileURL(`${dirname(dirname(dirname(process.argv[2])))}/`);
const load = (subpath) => import(import.meta.resolve(`${PACKAGE}/${subpath}`, prefix));
const [{ Client }, { StdioClientTransport }, { StreamableHTTPClientTransport }, types] =
  await Promise.all([
    load('client/index.js'),
    load('client/stdio.js'),
    load('client/streamableHttp.js'),
    load('types.js'),
  ]);
const manifest = new URL(`node_modules/${PACKAGE}/package.json`, prefix);
const { version } = JSON.parse(await readFile(manifest, 'utf8'));

const command = process.env.MCP_LAB_SERVER_COMMAND;
const transport = command
  ? new StdioClientTransport({ command: 'sh', args: ['-c', command] })
  : new StreamableHTTPClientTransport(new URL(process.env.MCP_LAB_URL));
const client = new Client({ name: 'typescript-sdk', version });
let updated;
const arrived = new Promise((resolve) => (updated = resolve));
client.setNotificationHandler(types.ResourceUpdatedNotificationSchema, (note) => {
  if (note.params.uri === URI) updated(true);
});

const text = async () => (await client.readResource({ uri: URI })).contents[0].text;
await client.connect(transport);
console.log(`${PACKAGE} ${version} over ${command ? 'stdio' : 'http'}`);
const { resources } = await client.listResources();
console.log(`listed ${resources.length} resource(s)`);
console.log(`read: ${await text()}`);
await client.subscribeResource({ uri: URI });
console.log(`subscribed to ${URI}`);
let timer;
const late = new Promise((resolve) => (timer = setTimeout(() => resolve(false), WAIT_MS)));
const notified = await Promise.race([arrived, late]);
clearTimeout(timer);
console.log(notified ? 'notified: resources/updated' : `no notification in ${WAIT_MS / 1000} s`);
console.log(`re-read: ${await text()}`);
await client.close();
process.exit(notified ? 0 : 1);
