// Exponential backoff with full jitter (delay = random(0, min(cap, base * 2^n))),
// kept pure so tests can pin the random source. Full jitter spreads the retries
// of many clients that failed at the same moment (a dedupd restart) instead of
// having them return in synchronized waves.

export interface BackoffOptions {
  /** Ceiling of the first retry's delay, in ms. */
  readonly baseMs: number;
  /** Largest ceiling, in ms. */
  readonly capMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 50, capMs: 2000 };

/** min(cap, base * 2^attempt) for retry number `attempt` (0-based); negative counts as 0. */
export function backoffCeilingMs(options: BackoffOptions, attempt: number): number {
  const n = Math.max(0, Math.floor(attempt));
  // 2^n overflows to Infinity for huge n, and min() then picks the cap.
  return Math.min(options.capMs, options.baseMs * 2 ** n);
}

/**
 * Full jitter: uniform in [0, backoffCeilingMs(options, attempt)).
 * `random` must return a value in [0, 1), like Math.random.
 */
export function fullJitterDelayMs(options: BackoffOptions, attempt: number, random: () => number): number {
  return random() * backoffCeilingMs(options, attempt);
}
