// Retries a call only while it fails with UNAVAILABLE: the one gRPC code the
// server uses for "nothing happened, try again". Every other code is an answer
// (bad input, overload, auth) that a retry would only repeat or make worse;
// busy keys (IN_USE) are OK responses and never reach this loop.
import { status as GrpcStatus } from '@grpc/grpc-js';

import { type BackoffOptions, fullJitterDelayMs } from './backoff.js';

export interface RetryPolicy {
  /** Attempts in all, counting the first (at least 1). */
  readonly maxAttempts: number;
  readonly backoff: BackoffOptions;
  /** Uniform in [0, 1); injectable for tests. */
  readonly random: () => number;
  /** Waits `ms`; injectable for tests. */
  readonly sleep: (ms: number) => Promise<void>;
}

/** True for an error carrying gRPC code UNAVAILABLE (a grpc-js ServiceError or a DedupRpcError). */
export function isUnavailable(error: unknown): boolean {
  return (
    typeof error === 'object' &&
    error !== null &&
    'code' in error &&
    (error as { code: unknown }).code === GrpcStatus.UNAVAILABLE
  );
}

/** Runs `attempt(n)` until it resolves, fails with something other than UNAVAILABLE, or attempts run out. */
export async function retryUnavailable<T>(policy: RetryPolicy, attempt: (n: number) => Promise<T>): Promise<T> {
  const attempts = Math.max(1, Math.floor(policy.maxAttempts));
  for (let n = 0; ; n++) {
    try {
      return await attempt(n);
    } catch (error) {
      if (!isUnavailable(error) || n + 1 >= attempts) throw error;
      await policy.sleep(fullJitterDelayMs(policy.backoff, n, policy.random));
    }
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
