// A TypeScript consumer of the packed @dedup/client, compiled with
// `tsc --noEmit`: the package's declarations resolve through its "exports"
// and type the API. The @ts-expect-error lines fail the check if the types
// were missing (everything `any`) or too loose.
import {
  type BeginResponse,
  type Claim,
  type ClaimCheckpoint,
  DedupClient,
  ExpiredError,
  type IdempotencyResult,
  OutcomeNotRecordedError,
  StaleFenceError,
} from '@dedup/client';
import { type Dedupd, startDedupd } from '@dedup/client/testing';

export async function sendOnce(address: string): Promise<IdempotencyResult<{ invoiceId: string }>> {
  const client = new DedupClient({ address, coalesce: true });
  try {
    const options = { namespace: 'billing:send_invoice', args: { amount: 5 }, leaseMs: 600, acceptRerun: false };
    return await client.withIdempotency(options, async (claim: Claim) => {
      const signal: AbortSignal = claim.signal;
      signal.throwIfAborted();
      const fence: bigint = claim.fence;
      const last: ClaimCheckpoint | null = claim.lastCheckpoint;
      // @ts-expect-error a checkpoint's step is a string
      await claim.checkpoint(1, last?.data);
      await claim.checkpoint('invoice-numbered', { fence: String(fence) });
      return { invoiceId: `inv-${fence}` };
    });
  } catch (error) {
    if (error instanceof ExpiredError) {
      const completedAt: number = error.completedAt;
      throw new Error(`ran at ${completedAt}`);
    }
    if (error instanceof StaleFenceError) {
      const call: 'Complete' | 'Renew' | 'Checkpoint' = error.call;
      const refused: OutcomeNotRecordedError = error;
      throw new Error(`${call}: ${refused.currentFence}`);
    }
    throw error;
  } finally {
    client.close();
  }
}

export function statusOf(answer: BeginResponse): 'STARTED' | 'IN_USE' | 'CONFLICT' | 'DUPLICATE' | 'EXPIRED' {
  // @ts-expect-error fences are bigint, not number
  const wrong: number = answer.fence;
  void wrong;
  return answer.status;
}

export async function server(): Promise<Dedupd> {
  // @ts-expect-error args is a list of flags
  await startDedupd({ args: '--min_lease_ms=100' }).catch(() => undefined);
  return startDedupd({ args: ['--min_lease_ms=100'] });
}

// No options: DEDUP_ADDRESS and the other DEDUP_* variables.
export const fromEnvironment = (): DedupClient => new DedupClient();
// @ts-expect-error the options are an object, not an address
new DedupClient('127.0.0.1:50051');
