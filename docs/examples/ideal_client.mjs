// An MCP client with the ideal subscription flow (TypeScript SDK): list, read,
// subscribe, wait for notifications/resources/updated, read again.
//   node ideal_client.mjs URL                   (http)
//   node ideal_client.mjs --stdio 'COMMAND'     (stdio: it starts the server itself)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const URI = 'test://review/status';
const [target, command] = process.argv.slice(2);
const transport = target === '--stdio'
  ? new StdioClientTransport({ command: 'sh', args: ['-c', command] })
  : new StreamableHTTPClientTransport(new URL(target));
const client = new Client({ name: 'ideal-ts-client', version: '1.0.0' });
let updated;
const arrived = new Promise((resolve) => (updated = resolve));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, () => updated());
await client.connect(transport);
const { resources } = await client.listResources();
if (!resources.some((r) => r.uri === URI)) throw new Error(`${URI} is not listed`);
console.log((await client.readResource({ uri: URI })).contents[0].text);
await client.subscribeResource({ uri: URI });
const late = new Promise((_, fail) => setTimeout(() => fail(new Error('no update in 30 s')), 30000));
await Promise.race([arrived, late]);
console.log((await client.readResource({ uri: URI })).contents[0].text);
await client.close();
process.exit(0);
