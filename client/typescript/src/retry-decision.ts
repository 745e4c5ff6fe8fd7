// The retry rule of the TypeScript client, as one pure function: what to do
// after an attempt failed. `invoke` (failover.ts: every unary call and every
// batch RPC, so also the Coalescer's batches) obeys it, and
// sendWithItemRetries (batch-retry.ts) applies itemResendable to the items of
// a batch answer.
//
// The rule, for the error an attempt failed with:
// 1. UNAVAILABLE naming a leader (`dedup-leader`) other than the node asked,
//    with fewer than maxRedirects redirects in this attempt: send on to the
//    leader at once, under the attempt's deadline ('hop'). A node naming
//    itself is on its way out (say, stopping), so that hint is ignored.
// 2. ABORTED with `dedup-outcome: unknown`: the outcome is unknown; with
//    'retry' (the request is safe to repeat) retried after the backoff,
//    with 'fail' the caller's answer (a batch settles it item by item).
// 3. Any other UNAVAILABLE (unreachable, no leader yet, hops used up): move
//    past the node ('advance'), retry after the backoff.
// 4. RESOURCE_EXHAUSTED with a RetryInfo (a tenant over its limits): retry
//    after exactly the server's delay (capped at 30 s where it is read).
// 5. Anything else is the answer; DEADLINE_EXCEEDED also moves later calls
//    past the node (a stopped node accepts connections but never answers).
// Rules 2-4 with no attempt left: the answer (the last error).
import { status as GrpcStatus } from '@grpc/grpc-js';

import { type BackoffOptions, fullJitterDelayMs } from './backoff.js';
import { DedupRpcError, isOutcomeUnknown } from './errors.js';
import { isUnavailable } from './retry.js';

/**
 * What to do when an attempt's outcome is unknown (ABORTED with
 * `dedup-outcome: unknown`): 'retry' sends the same request again, which
 * must then be safe (a Begin with an owner, Complete, Renew, Get, Release);
 * 'fail' rejects at once (an anonymous Begin could not re-enter its claim;
 * a batch retries its items itself).
 */
export type OnUnknownOutcome = 'retry' | 'fail';

/** Where the call stood when the attempt failed. */
export interface AttemptState {
  /** The address the attempt went to. */
  readonly target: string;
  /** The attempt that failed, 0-based. */
  readonly attempt: number;
  /** Leader redirects already followed within it. */
  readonly hops: number;
}

export interface RetryLimits {
  /** Attempts in all, counting the first (at least 1). */
  readonly maxAttempts: number;
  /** Leader redirects followed within one attempt. */
  readonly maxRedirects: number;
  readonly backoff: BackoffOptions;
  /** Uniform in [0, 1): the backoff's only randomness, drawn only for a backoff retry. */
  readonly random: () => number;
}

export type RetryDecision =
  /** Send again at once to `leader`, within the attempt. */
  | { readonly action: 'hop'; readonly leader: string }
  /**
   * 'retry': a new attempt after `delayMs`; 'answer': the error is the
   * call's. `advance`: move later calls past the node first.
   * `outcomeUnknown`: the error was an unknown outcome.
   */
  | {
      readonly action: 'retry' | 'answer';
      readonly delayMs: number;
      readonly advance: boolean;
      readonly outcomeUnknown: boolean;
    };

/** The rule above for `error`. Pure (but for `limits.random`). */
export function decideRetry(
  error: unknown,
  state: AttemptState,
  limits: RetryLimits,
  onUnknown: OnUnknownOutcome,
): RetryDecision {
  const unavailable = isUnavailable(error);
  const leader = error instanceof DedupRpcError && unavailable ? error.leader : undefined;
  if (leader !== undefined && leader !== state.target && state.hops < Math.max(0, Math.floor(limits.maxRedirects))) {
    return { action: 'hop', leader };
  }
  const attemptsLeft = state.attempt + 1 < Math.max(1, Math.floor(limits.maxAttempts));
  const backoff = (): number => fullJitterDelayMs(limits.backoff, state.attempt, limits.random);
  const answer = (advance: boolean, outcomeUnknown = false): RetryDecision => ({
    action: 'answer',
    delayMs: 0,
    advance,
    outcomeUnknown,
  });
  if (isOutcomeUnknown(error)) {
    if (onUnknown === 'fail' || !attemptsLeft) return answer(false, true);
    return { action: 'retry', delayMs: backoff(), advance: false, outcomeUnknown: true };
  }
  if (unavailable) {
    if (!attemptsLeft) return answer(true);
    return { action: 'retry', delayMs: backoff(), advance: true, outcomeUnknown: false };
  }
  const serverDelayMs = error instanceof DedupRpcError ? error.retryDelayMs : undefined;
  if (serverDelayMs !== undefined) {
    if (!attemptsLeft) return answer(false);
    return { action: 'retry', delayMs: serverDelayMs, advance: false, outcomeUnknown: false };
  }
  return answer(error instanceof DedupRpcError && error.code === GrpcStatus.DEADLINE_EXCEEDED);
}

/**
 * Whether a batch item refused with gRPC `code` goes again in the next round
 * (if rounds remain): UNAVAILABLE (nothing happened), or ABORTED (outcome
 * unknown) when the item is `safeToResend`.
 */
export function itemResendable(code: number, safeToResend: boolean): boolean {
  return code === GrpcStatus.UNAVAILABLE || (code === GrpcStatus.ABORTED && safeToResend);
}
