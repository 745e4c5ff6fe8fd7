// The send_invoice tool: the side effect runs inside withIdempotency, so a
// retried call (same key, or same arguments when no key is given) returns
// the first call's outcome, error included, from any server process.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  ConflictError,
  type DedupClient,
  ExpiredError,
  InUseTimeoutError,
  OutcomeNotRecordedError,
  ReplayedError,
} from '@dedup/client';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

import type { InvoiceServerConfig } from './config.js';
import { appendToLedger, FenceRefusedError } from './ledger.js';

export const sendInvoiceInputSchema = {
  customer: z.string().min(1).describe('Customer id or email'),
  amount: z.number().describe('Amount in major units, e.g. 129.99'),
  currency: z.string().length(3).describe('ISO 4217 code, e.g. EUR'),
  idempotencyKey: z
    .string()
    .min(1)
    .max(255)
    .optional()
    .describe('Names this invoice; a retry with the same key never sends twice. Default: derived from the other arguments'),
};

const inputObject = z.object(sendInvoiceInputSchema);
export type SendInvoiceArgs = z.infer<typeof inputObject>;

export interface SentInvoice {
  readonly status: 'sent';
  readonly invoiceId: string;
  readonly customer: string;
  readonly amount: number;
  readonly currency: string;
}

/** A permanent failure: stored by dedup and replayed to every retry. */
export class InvoiceError extends Error {
  override readonly name = 'InvoiceError';
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

export function sendInvoiceHandler(
  client: DedupClient,
  config: InvoiceServerConfig,
): (args: SendInvoiceArgs) => Promise<CallToolResult> {
  return async (args: SendInvoiceArgs): Promise<CallToolResult> => {
    // The key names the call; it is not part of what is hashed, so the same
    // key with different invoice details is a CONFLICT.
    const { idempotencyKey, ...invoice } = args;
    try {
      const { result, duplicate, takeover } = await client.withIdempotency(
        {
          namespace: `${config.clientId}:send_invoice`,
          ...(idempotencyKey !== undefined && { key: idempotencyKey }),
          args: invoice,
          ...(config.leaseMs !== undefined && { leaseMs: config.leaseMs }),
        },
        async (claim): Promise<SentInvoice> => {
          // Checked here rather than in the schema so the example shows a
          // stored error: a retry replays it without sending.
          if (!(invoice.amount > 0)) throw new InvoiceError('invalid amount', 'INVALID_AMOUNT');
          // withIdempotency renews the lease while this runs; a refused
          // renewal (another call took over) aborts the signal. A cheap early
          // exit, but a send already on its way cannot see it: only the fence,
          // checked by the ledger (the downstream), refuses a late send.
          claim.signal.throwIfAborted();
          const invoiceId = `inv-${randomUUID()}`;
          if (config.sendDelayMs > 0) await sleep(config.sendDelayMs); // TEST ONLY (SEND_DELAY_MS): a slow send
          await appendToLedger(config.ledgerFile, { invoiceId, ...invoice, key: claim.key, fence: String(claim.fence) });
          return { status: 'sent', invoiceId, ...invoice };
        },
      );
      return toolResult({ ...result, duplicate, takeover }, false);
    } catch (error) {
      return toolError(error);
    }
  };
}

function toolError(error: unknown): CallToolResult {
  if (error instanceof ConflictError) {
    return toolResult({ error: `conflict: idempotency key "${error.key}" was already used with different arguments; use a new key for a new invoice`, code: 'IDEMPOTENCY_KEY_CONFLICT' }, true);
  }
  if (error instanceof InvoiceError) {
    return toolResult({ error: error.message, code: error.code, duplicate: false }, true);
  }
  if (error instanceof ReplayedError) {
    return toolResult({ error: error.message, code: error.code, duplicate: true }, true);
  }
  if (error instanceof ExpiredError) {
    // Sent long ago: its record (and so the invoice id) expired. Never re-sent silently.
    return toolResult({ error: `already sent (${new Date(error.completedAt).toISOString()}); its outcome is no longer kept, so it was not sent again`, code: 'ALREADY_SENT_EXPIRED' }, true);
  }
  if (error instanceof InUseTimeoutError) {
    return toolResult({ error: 'in use: this invoice is still being sent by another call; retry later with the same key', code: 'IDEMPOTENCY_KEY_IN_USE' }, true);
  }
  if (error instanceof FenceRefusedError || (error instanceof OutcomeNotRecordedError && error.cause instanceof FenceRefusedError)) {
    return toolResult({ error: 'not sent by this call: it outlived its lease and a newer attempt sent the invoice (the ledger refused the older fence); retry with the same key to get its outcome', code: 'SUPERSEDED' }, true);
  }
  if (error instanceof OutcomeNotRecordedError) {
    return toolResult({ error: 'the invoice may have been sent but its outcome was not recorded (lease lost); retry with the same key to get the recorded outcome', code: 'OUTCOME_NOT_RECORDED' }, true);
  }
  // dedupd unreachable, bad input it refused, ledger write failed: report, do not crash the server.
  return toolResult({ error: error instanceof Error ? error.message : String(error), code: 'INTERNAL' }, true);
}

function toolResult(payload: object, isError: boolean): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(payload) }], isError };
}
