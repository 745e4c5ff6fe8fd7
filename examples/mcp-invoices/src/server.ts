#!/usr/bin/env node
// Stdio MCP server exposing send_invoice, made idempotent by dedup.
// Env: DEDUP_ADDRESS, DEDUP_CLIENT_ID, DEDUP_LEASE_MS, LEDGER_FILE (see config.ts);
// SEND_DELAY_MS is for tests only.
import { DedupClient } from '@dedup/client';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';

import { configFromEnv } from './config.js';
import { sendInvoiceHandler, sendInvoiceInputSchema } from './send-invoice.js';

const config = configFromEnv();
// Tool calls the host runs in parallel share BeginBatch/CompleteBatch RPCs;
// a lone call still leaves at once.
const client = new DedupClient({ address: config.dedupAddress, coalesce: true });
const server = new McpServer({ name: 'mcp-invoices', version: '0.1.0' });

server.registerTool(
  'send_invoice',
  {
    title: 'Send invoice',
    description:
      'Sends an invoice to a customer. Safe to retry: a call with the same idempotencyKey (or, without one, ' +
      'the same arguments) is sent at most once and returns the first outcome with duplicate: true.',
    inputSchema: sendInvoiceInputSchema,
    annotations: { readOnlyHint: false, idempotentHint: true, destructiveHint: false, openWorldHint: true },
  },
  sendInvoiceHandler(client, config),
);

// The host ends a stdio server by closing its stdin (then signals): exit
// promptly either way, or the open gRPC channel would keep the process alive.
let closing = false;
async function shutdown(): Promise<void> {
  if (closing) return;
  closing = true;
  client.close();
  await server.close();
  process.exit(0);
}
process.stdin.on('end', () => void shutdown());
process.on('SIGTERM', () => void shutdown());
process.on('SIGINT', () => void shutdown());

await server.connect(new StdioServerTransport());
