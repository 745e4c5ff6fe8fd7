// The example's side effect: "sending" an invoice appends one JSON line to a
// ledger file, so tests can count exactly how often it really happened.
//
// The ledger stands for the downstream system, and does what a real one
// should do with dedup's fencing token: it refuses a write whose fence is
// lower than one it already accepted for the same key. A caller whose lease
// lapsed (its process froze, its send stalled) and was taken over still holds
// the old fence, so its late write is refused even if it never learned that
// it lost the claim. Fences are per (namespace, key) in dedupd; this ledger
// compares them per key, so give each DEDUP_CLIENT_ID (namespace) its own
// LEDGER_FILE.
import { appendFile, mkdir, readFile, rmdir } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

import { RetryableError } from '@dedup/client';

export interface LedgerEntry {
  readonly invoiceId: string;
  readonly customer: string;
  readonly amount: number;
  readonly currency: string;
  /** The idempotency key and fence of the execution that wrote the line. */
  readonly key: string;
  readonly fence: string;
}

/** The ledger refused a write: a newer execution of this key (a higher fence) already wrote. Nothing was written. */
export class FenceRefusedError extends Error {
  override readonly name = 'FenceRefusedError';
  readonly code = 'FENCE_REFUSED';
  constructor(
    readonly key: string,
    readonly fence: bigint,
    /** The highest fence already written for the key. */
    readonly highestFence: bigint,
  ) {
    super(`ledger: refused the write for key "${key}" with fence ${fence}: fence ${highestFence} already wrote`);
  }
}

// Several server processes append to one ledger: the check and the append
// must be one step, as in a database transaction.
const LOCK_TIMEOUT_MS = 5000;
const LOCK_POLL_MS = 2;

/** Appends `entry` unless a higher fence was already written for its key (then FenceRefusedError). */
export async function appendToLedger(path: string, entry: LedgerEntry): Promise<void> {
  await withLock(`${path}.lock`, async () => {
    const fence = BigInt(entry.fence);
    const highest = await highestFence(path, entry.key);
    if (highest !== undefined && fence < highest) throw new FenceRefusedError(entry.key, fence, highest);
    await appendFile(path, `${JSON.stringify(entry)}\n`, { flag: 'a' });
  });
}

async function highestFence(path: string, key: string): Promise<bigint | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  let highest: bigint | undefined;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const written = JSON.parse(line) as LedgerEntry;
    if (written.key !== key) continue;
    const fence = BigInt(written.fence);
    if (highest === undefined || fence > highest) highest = fence;
  }
  return highest;
}

// mkdir is atomic across processes: whoever creates the directory holds the lock.
async function withLock(lockDir: string, body: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + LOCK_TIMEOUT_MS;
  for (;;) {
    try {
      await mkdir(lockDir);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      // Nothing was written: a retry may send it (the claim is released).
      if (Date.now() > deadline) throw new RetryableError(`ledger: ${lockDir} held for over ${LOCK_TIMEOUT_MS} ms`);
      await sleep(LOCK_POLL_MS);
    }
  }
  try {
    await body();
  } finally {
    await rmdir(lockDir);
  }
}
