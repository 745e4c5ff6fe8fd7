// One call against a single dedupd or a replicated group: follows the
// leader a follower names, moves on to the next address when one fails, and
// retries an operation whose outcome is unknown only where the caller says a
// retry is safe. An unknown outcome is never reported as "nothing happened".
import type { Client as GrpcClient } from '@grpc/grpc-js';
import { status as GrpcStatus } from '@grpc/grpc-js';

import { fullJitterDelayMs } from './backoff.js';
import type { Endpoints } from './endpoints.js';
import { DedupRpcError, isOutcomeUnknown } from './errors.js';
import { isUnavailable, type RetryPolicy } from './retry.js';

export interface FailoverPolicy extends RetryPolicy {
  /** Leader redirects followed within one attempt, at once and under its deadline. */
  readonly maxRedirects: number;
}

/**
 * What to do when an attempt's outcome is unknown (ABORTED with
 * `dedup-outcome: unknown`): 'retry' sends the same request again, which
 * must then be safe (a Begin with an owner, Complete, Renew, Get, Release);
 * 'fail' rejects at once (an anonymous Begin could not re-enter its claim;
 * a batch retries its items itself).
 */
export type OnUnknownOutcome = 'retry' | 'fail';

export interface Invoked<T> {
  readonly value: T;
  /** An earlier attempt of this call had an unknown outcome (it may have taken effect). */
  readonly afterUnknownOutcome: boolean;
}

/**
 * Runs `attempt` until it resolves. Each attempt has its own deadline
 * (`perAttemptMs` from its start); a follower's UNAVAILABLE naming the leader
 * sends the attempt on to that leader at once, under the same deadline, up to
 * `maxRedirects` times. Any other UNAVAILABLE (unreachable, no leader yet)
 * moves on to the next address and, like an unknown outcome under 'retry',
 * is retried after full-jitter backoff while attempts remain; a
 * RESOURCE_EXHAUSTED carrying a RetryInfo (a tenant over its limits) after
 * exactly the server's delay (capped at 30 s). Other errors
 * reject at once; DEADLINE_EXCEEDED also moves later calls to the next
 * address (a stopped node accepts connections but never answers).
 *
 * Rejects with `attempt`'s error, or, once an attempt's outcome was unknown,
 * with a DedupRpcError ABORTED whose `outcomeUnknown` is true.
 */
export async function invoke<T>(
  endpoints: Endpoints,
  policy: FailoverPolicy,
  method: string,
  perAttemptMs: number,
  onUnknown: OnUnknownOutcome,
  attempt: (channel: GrpcClient, deadline: number) => Promise<T>,
): Promise<Invoked<T>> {
  const attempts = Math.max(1, Math.floor(policy.maxAttempts));
  const maxRedirects = Math.max(0, Math.floor(policy.maxRedirects));
  let unknown: DedupRpcError | undefined;
  for (let n = 0; ; n++) {
    const deadline = Date.now() + perAttemptMs;
    let target = endpoints.current;
    let error: unknown;
    for (let hops = 0; ; hops++) {
      try {
        const value = await attempt(endpoints.channel(target), deadline);
        return { value, afterUnknownOutcome: unknown !== undefined };
      } catch (e) {
        error = e;
      }
      const leader = error instanceof DedupRpcError && isUnavailable(error) ? error.leader : undefined;
      if (leader === undefined || leader === target || hops >= maxRedirects) break;
      endpoints.follow(leader);
      target = leader;
    }

    // Over a limit (a tenant's): refused before anything happened, and the
    // server says when to come back.
    const serverDelayMs = error instanceof DedupRpcError ? error.retryDelayMs : undefined;
    if (isOutcomeUnknown(error)) {
      unknown = error as DedupRpcError;
      if (onUnknown === 'fail') throw error;
    } else if (isUnavailable(error)) {
      endpoints.failed(target);
    } else if (serverDelayMs === undefined) {
      if (isCode(error, GrpcStatus.DEADLINE_EXCEEDED)) endpoints.failed(target);
      throw unknownOr(unknown, error, method);
    }
    if (n + 1 >= attempts) throw unknownOr(unknown, error, method);
    // The server's delay exactly (no jitter on top), else the backoff.
    await policy.sleep(serverDelayMs ?? fullJitterDelayMs(policy.backoff, n, policy.random));
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

function isCode(error: unknown, code: number): boolean {
  return error instanceof DedupRpcError && error.code === code;
}
