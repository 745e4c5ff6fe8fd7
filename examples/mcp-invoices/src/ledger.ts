// The example's side effect: "sending" an invoice appends one JSON line to a
// ledger file, so tests can count exactly how often it really happened.
import { appendFile } from 'node:fs/promises';

export interface LedgerEntry {
  readonly invoiceId: string;
  readonly customer: string;
  readonly amount: number;
  readonly currency: string;
  /** The idempotency key and fence of the execution that wrote the line. */
  readonly key: string;
  readonly fence: string;
}

export async function appendToLedger(path: string, entry: LedgerEntry): Promise<void> {
  // One write call per line with O_APPEND: lines from concurrent servers never interleave.
  await appendFile(path, `${JSON.stringify(entry)}\n`, { flag: 'a' });
}
