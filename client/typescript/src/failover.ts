// One call against a single dedupd or a replicated group: follows the
// leader a follower names, moves on to the next address when one fails, and
// retries an operation whose outcome is unknown only where the caller says a
// retry is safe. An unknown outcome is never reported as "nothing happened".
import type { Client as GrpcClient } from '@grpc/grpc-js';
import { status as GrpcStatus } from '@grpc/grpc-js';

import type { Route } from './endpoints.js';
import { DedupRpcError } from './errors.js';
import type { RetryPolicy } from './retry.js';
import { decideRetry, type OnUnknownOutcome, type RetryDecision } from './retry-decision.js';

export interface FailoverPolicy extends RetryPolicy {
  /** Leader redirects followed within one attempt, at once and under its deadline. */
  readonly maxRedirects: number;
}

export type { OnUnknownOutcome } from './retry-decision.js';

export interface Invoked<T> {
  readonly value: T;
  /** An earlier attempt of this call had an unknown outcome (it may have taken effect). */
  readonly afterUnknownOutcome: boolean;
}

/**
 * Runs `attempt` until it resolves. Each attempt has its own deadline
 * (`perAttemptMs` from its start); after each failure it does what
 * decideRetry (retry-decision.ts) says: send on to the leader a follower
 * named (same attempt, same deadline), move later calls past the node, wait
 * (backoff, or the server's RetryInfo delay) and try again, or reject.
 *
 * Rejects with `attempt`'s error, or, once an attempt's outcome was unknown,
 * with a DedupRpcError ABORTED whose `outcomeUnknown` is true.
 */
export async function invoke<T>(
  endpoints: Route,
  policy: FailoverPolicy,
  method: string,
  perAttemptMs: number,
  onUnknown: OnUnknownOutcome,
  attempt: (channel: GrpcClient, deadline: number) => Promise<T>,
): Promise<Invoked<T>> {
  let unknown: DedupRpcError | undefined;
  for (let n = 0; ; n++) {
    const deadline = Date.now() + perAttemptMs;
    let target = endpoints.current;
    let error: unknown;
    let decision: RetryDecision;
    for (let hops = 0; ; hops++) {
      try {
        const value = await attempt(endpoints.channel(target), deadline);
        return { value, afterUnknownOutcome: unknown !== undefined };
      } catch (e) {
        error = e;
      }
      decision = decideRetry(error, { target, attempt: n, hops }, policy, onUnknown);
      if (decision.action !== 'hop') break;
      endpoints.follow(decision.leader);
      target = decision.leader;
    }
    if (decision.outcomeUnknown) unknown = error as DedupRpcError;
    if (decision.advance) endpoints.failed(target);
    if (decision.action === 'answer') throw unknownOr(unknown, error, method);
    await policy.sleep(decision.delayMs);
  }
}

/** `last`, or once an attempt's outcome was unknown, an error that says so. */
function unknownOr(unknown: DedupRpcError | undefined, last: unknown, method: string): unknown {
  if (unknown === undefined || last === unknown) return last;
  const lastText = last instanceof DedupRpcError ? `${last.codeName}: ${last.details}` : String(last);
  return new DedupRpcError(
    method,
    GrpcStatus.ABORTED,
    'ABORTED',
    `${unknown.details} (retried; last attempt: ${lastText})`,
    { cause: last, outcomeUnknown: true },
  );
}
