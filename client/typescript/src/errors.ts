// Every error this package throws, so callers can branch with instanceof
// instead of parsing messages.
import { status as GrpcStatus } from '@grpc/grpc-js';

import type { FencedStatus, Outcome } from './types.js';

/** The name of a gRPC status code, e.g. "INVALID_ARGUMENT" for 3. */
export function grpcCodeName(code: number): string {
  return GrpcStatus[code] ?? `CODE_${code}`;
}

/** What a DedupRpcError learned from the server's trailing metadata. */
export interface DedupRpcErrorOptions {
  readonly cause?: unknown;
  /**
   * The operation may or may not have taken effect (the server's ABORTED
   * with `dedup-outcome: unknown`, or a later attempt's failure after one).
   */
  readonly outcomeUnknown?: boolean;
  /** A follower's `dedup-leader`: the leader's host:port. */
  readonly leader?: string;
  /**
   * RESOURCE_EXHAUSTED with a RetryInfo (a tenant over its limits): the delay
   * the server asked for, in ms (capped at 30 s).
   */
  readonly retryDelayMs?: number;
}

/**
 * A gRPC call failed (after the client's retries, if any). When
 * `outcomeUnknown` is true the code is ABORTED and the operation may or may
 * not have taken effect: it is never reported as UNAVAILABLE ("nothing
 * happened") once an attempt's outcome was unknown.
 */
export class DedupRpcError extends Error {
  override readonly name = 'DedupRpcError';
  /** True when the operation may have taken effect although the call failed. */
  readonly outcomeUnknown: boolean;
  /** The leader a follower named (trailing metadata `dedup-leader`), if any. */
  readonly leader: string | undefined;
  /**
   * RESOURCE_EXHAUSTED carrying a RetryInfo (a tenant over its limits): the
   * server's "retry after", in ms, capped at 30 s. The client already waited
   * and retried while attempts remained; undefined for other errors.
   */
  readonly retryDelayMs: number | undefined;
  constructor(
    /** The dedup.v1 method, e.g. "Begin". */
    readonly method: string,
    /** gRPC status code (grpc-js `status` enum), e.g. 14 for UNAVAILABLE. */
    readonly code: number,
    /** gRPC code name, e.g. "INVALID_ARGUMENT". */
    readonly codeName: string,
    /** The server's message (for INVALID_ARGUMENT: "<field>: <rule>"). */
    readonly details: string,
    options: DedupRpcErrorOptions = {},
  ) {
    super(`dedup ${method}: ${codeName}: ${details}`, 'cause' in options ? { cause: options.cause } : undefined);
    this.outcomeUnknown = options.outcomeUnknown ?? false;
    this.leader = options.leader;
    this.retryDelayMs = options.retryDelayMs;
  }
}

/** True for a DedupRpcError whose operation may or may not have taken effect. */
export function isOutcomeUnknown(error: unknown): boolean {
  return error instanceof DedupRpcError && error.outcomeUnknown;
}

/** The server answered something this client does not understand (e.g. a newer enum value). */
export class DedupProtocolError extends Error {
  override readonly name = 'DedupProtocolError';
}

/**
 * Mark a failure as retryable: the side effect certainly did not happen, so
 * withIdempotency releases the claim (the next call runs afresh) instead of
 * storing the error for replay.
 */
export class RetryableError extends Error {
  override readonly name: string = 'RetryableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** What withIdempotency stores for a permanent failure and replays to duplicates. */
export interface StoredError {
  readonly name: string;
  readonly message: string;
  readonly code?: string | number;
}

/** The key was already used with different arguments (Begin answered CONFLICT). */
export class ConflictError extends Error {
  override readonly name = 'ConflictError';
  constructor(
    readonly namespace: string,
    readonly key: string,
    readonly fence: bigint,
  ) {
    super(`dedup: conflict: key "${key}" in "${namespace}" was already used with different arguments`);
  }
}

/**
 * A previous execution of this key failed permanently; its stored error is
 * replayed (the function was NOT run again). `message` and `code` are the
 * stored ones, so callers can report it exactly as the first failure.
 */
export class ReplayedError extends Error {
  override readonly name = 'ReplayedError';
  readonly code: string | number | undefined;
  constructor(
    readonly stored: StoredError,
    readonly namespace: string,
    readonly key: string,
  ) {
    super(stored.message);
    this.code = stored.code;
  }
}

/** Which call lost the claim, and what the error was caused by. */
export interface OutcomeNotRecordedOptions {
  readonly cause?: unknown;
  /**
   * The call the server refused: "Complete" (default; the function ran to
   * the end), "Renew" (a background renewal while the function ran) or
   * "Checkpoint" (claim.checkpoint while the function ran). For the last
   * two the claim was lost, the function's signal aborted, and Complete was
   * not sent.
   */
  readonly call?: LostClaimCall;
}

/** The call that found a claim lost. */
export type LostClaimCall = 'Complete' | 'Renew' | 'Checkpoint';

/**
 * The claim was lost, so the function's outcome was NOT recorded: Complete
 * was refused after the function ran, or (`call` "Renew") a renewal was
 * refused while it ran. `answer` says why: STALE_FENCE (see StaleFenceError),
 * NOT_FOUND (the claim was released, forgotten or expired) or
 * ALREADY_COMPLETED (this fence completed differently).
 */
export class OutcomeNotRecordedError extends Error {
  override readonly name: string = 'OutcomeNotRecordedError';
  /** The refused call. */
  readonly call: LostClaimCall;
  constructor(
    readonly answer: FencedStatus,
    readonly namespace: string,
    readonly key: string,
    /** The fence this execution held. */
    readonly fence: bigint,
    /** The record's fence as the server reported it. */
    readonly currentFence: bigint,
    options?: OutcomeNotRecordedOptions,
  ) {
    const call = options?.call ?? 'Complete';
    super(
      `dedup: ${call} for key "${key}" in "${namespace}" with fence ${fence} answered ${answer}` +
        ` (current fence ${currentFence}): ` +
        (call === 'Complete'
          ? 'the side effect ran but its outcome was NOT recorded'
          : 'the claim was lost while the function ran; its outcome was NOT recorded'),
      options !== undefined && 'cause' in options ? { cause: options.cause } : undefined,
    );
    this.call = call;
  }
}

/**
 * Complete (or a renewal) answered STALE_FENCE: another owner took over (a
 * newer fence); this outcome was NOT recorded.
 */
export class StaleFenceError extends OutcomeNotRecordedError {
  override readonly name: string = 'StaleFenceError';
  constructor(namespace: string, key: string, fence: bigint, currentFence: bigint, options?: OutcomeNotRecordedOptions) {
    super('STALE_FENCE', namespace, key, fence, currentFence, options);
  }
}

/**
 * Begin answered EXPIRED: the operation already ran (`completedAt`, with
 * `outcome`, under `fence`) so long ago that its record expired; only a
 * tombstone is kept (until `tombstoneExpiresAt`), and its result is gone.
 * The function was NOT run again. Not a duplicate: there is nothing to
 * replay. Pass acceptRerun to run it again when that is acceptable.
 * Timestamps are the server's clock, Unix ms.
 */
export class ExpiredError extends Error {
  override readonly name = 'ExpiredError';
  constructor(
    readonly namespace: string,
    readonly key: string,
    /** The fence of the execution that completed. */
    readonly fence: bigint,
    /** How it ended (null if the server did not say). */
    readonly outcome: Outcome | null,
    readonly createdAt: number,
    readonly completedAt: number,
    readonly attempts: number,
    readonly tombstoneExpiresAt: number,
  ) {
    super(
      `dedup: key "${key}" in "${namespace}" already ran (outcome ${outcome ?? 'unknown'}, completed at ` +
        `${isoTime(completedAt)}, fence ${fence}); its record expired and its result is no longer kept. ` +
        'Not run again: pass acceptRerun to run it again',
    );
  }
}

function isoTime(ms: number): string {
  const date = new Date(ms);
  return Number.isFinite(date.getTime()) && ms > 0 ? date.toISOString() : `${ms} ms`;
}

/** Another owner still held the key when withIdempotency's overall deadline ran out. */
export class InUseTimeoutError extends Error {
  override readonly name = 'InUseTimeoutError';
  constructor(
    readonly namespace: string,
    readonly key: string,
    readonly fence: bigint,
  ) {
    super(`dedup: key "${key}" in "${namespace}" still IN_USE by another owner (fence ${fence}) at the deadline`);
  }
}
