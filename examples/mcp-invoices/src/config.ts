// Settings of the invoices MCP server, all from the environment (an MCP host
// starts stdio servers with a command line and an env, nothing else).

export interface InvoiceServerConfig {
  /** dedupd's host:port (DEDUP_ADDRESS). */
  readonly dedupAddress: string;
  /** Namespace prefix naming this tool's callers (DEDUP_CLIENT_ID): keys are scoped to `<client>:send_invoice`. */
  readonly clientId: string;
  /** Lease per execution in ms (DEDUP_LEASE_MS); undefined: the server default (60 s). */
  readonly leaseMs: number | undefined;
  /** Where sent invoices are appended, one JSON line each (LEDGER_FILE). */
  readonly ledgerFile: string;
  /**
   * TEST ONLY (SEND_DELAY_MS): a slow send: a pause after the claim, just
   * before the invoice is written, so tests can kill or freeze the server
   * mid-execution or overlap two servers.
   */
  readonly sendDelayMs: number;
}

export function configFromEnv(env: NodeJS.ProcessEnv = process.env): InvoiceServerConfig {
  return {
    dedupAddress: nonEmpty(env['DEDUP_ADDRESS']) ?? '127.0.0.1:50051',
    clientId: nonEmpty(env['DEDUP_CLIENT_ID']) ?? 'mcp-invoices',
    leaseMs: optionalInt(env, 'DEDUP_LEASE_MS'),
    ledgerFile: nonEmpty(env['LEDGER_FILE']) ?? 'invoices-ledger.jsonl',
    sendDelayMs: optionalInt(env, 'SEND_DELAY_MS') ?? 0,
  };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

function optionalInt(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const text = nonEmpty(env[name]);
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got "${text}"`);
  return value;
}
