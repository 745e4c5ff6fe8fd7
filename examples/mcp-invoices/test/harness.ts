// Real processes for the end-to-end tests: the compiled MCP server spawned
// through the SDK's stdio transport, talking to a real dedupd.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const SERVER_JS = fileURLToPath(new URL('../src/server.js', import.meta.url));

export interface InvoiceServer {
  readonly client: Client;
  readonly pid: number;
  callSendInvoice(args: Record<string, unknown>): Promise<ToolAnswer>;
  /** Closes stdin (the server exits on its own); the SDK escalates to signals. Idempotent. */
  close(): Promise<void>;
}

export interface ToolAnswer {
  readonly isError: boolean;
  readonly text: string;
  /** The JSON object the tool put in its text content. */
  readonly payload: Record<string, unknown>;
}

export async function startInvoiceServer(env: Record<string, string>): Promise<InvoiceServer> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [SERVER_JS],
    env: { ...getDefaultEnvironment(), ...env },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'mcp-invoices-e2e', version: '0.0.0' });
  await client.connect(transport);
  const pid = transport.pid;
  if (pid === null) throw new Error('MCP server did not start');
  let closed: Promise<void> | undefined;
  return {
    client,
    pid,
    async callSendInvoice(args) {
      const result = await client.callTool({ name: 'send_invoice', arguments: args });
      const content = result.content as Array<{ type: string; text?: string }>;
      const text = content.map((c) => c.text ?? '').join('');
      return { isError: result.isError === true, text, payload: JSON.parse(text) as Record<string, unknown> };
    },
    close() {
      closed ??= client.close();
      return closed;
    },
  };
}

/** A temp dir holding one ledger file; `lines()` parses what was appended. */
export class Ledger {
  readonly dir = mkdtempSync(join(tmpdir(), 'mcp-invoices-'));
  readonly path = join(this.dir, 'ledger.jsonl');

  lines(): Array<Record<string, unknown>> {
    if (!existsSync(this.path)) return [];
    return readFileSync(this.path, 'utf8')
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
