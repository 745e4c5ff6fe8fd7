// withIdempotency: run a side effect at most once per (namespace, key) across
// every process that shares a dedupd, and replay its outcome (errors
// included) to every retry.
import { randomUUID } from 'node:crypto';

import { argsHash } from './args-hash.js';
import {
  ConflictError,
  DedupProtocolError,
  InUseTimeoutError,
  OutcomeNotRecordedError,
  ReplayedError,
  RetryableError,
  StaleFenceError,
  type StoredError,
} from './errors.js';
import { sleep as defaultSleep } from './retry.js';
import type {
  BeginRequest,
  BeginResponse,
  CompleteRequest,
  CompleteResponse,
  Outcome,
  ReleaseRequest,
  ReleaseResponse,
} from './types.js';

/** The calls withIdempotency needs; DedupClient has them (tests may pass a fake). */
export interface IdempotencyCalls {
  begin(request: BeginRequest): Promise<BeginResponse>;
  complete(request: CompleteRequest): Promise<CompleteResponse>;
  release(request: ReleaseRequest): Promise<ReleaseResponse>;
}

export interface IdempotencyOptions {
  /** Scope of the key, e.g. "<client>:<tool>". */
  readonly namespace: string;
  /** Names the logical operation. Default: the hex SHA-256 of the canonical args, so equal args dedupe. */
  readonly key?: string;
  /** The tool arguments (JSON values only); their canonical hash detects a key reused for other args. */
  readonly args: unknown;
  /** Lease of each claim in ms; run longer and another caller may take over. Default: the server's. */
  readonly leaseMs?: number;
  /** How long the record (and so the replayable outcome) is kept, in s. Default: the server's (24 h). */
  readonly ttlS?: number;
  /** While another owner runs the key, each Begin asks the server to wait this long (max 60 s). Default 10 s. */
  readonly waitPerCallMs?: number;
  /** Overall limit for waiting on another owner, in ms; `fn` itself is not bounded. Default 120 s. */
  readonly deadlineMs?: number;
  /**
   * Extra test for failures whose side effect certainly did not happen (the
   * claim is released so the next call runs afresh). RetryableError always is.
   */
  readonly isRetryable?: (error: unknown) => boolean;
  /** Owner id per claim attempt. Default crypto.randomUUID. */
  readonly newOwner?: () => string;
  /** Clock and sleep for the IN_USE loop (injectable for tests). */
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
}

/** What `fn` learns about the execution it owns. */
export interface Claim {
  readonly namespace: string;
  readonly key: string;
  readonly owner: string;
  readonly fence: bigint;
  /** A previous owner's lease ran out: its attempt may have partly run the side effect. */
  readonly takeover: boolean;
  readonly attempts: number;
  /** Server clock, Unix ms. Renew (client.renew) before then if `fn` may take longer. */
  readonly leaseExpiresAt: number;
}

export type IdempotentFunction<T> = (claim: Claim) => T | Promise<T>;

export interface IdempotencyResult<T> {
  /** fn's result after a JSON round trip: exactly what duplicates receive. */
  readonly result: T;
  /** True when the stored result was replayed and `fn` did not run. */
  readonly duplicate: boolean;
  /** Always SUCCESS: a stored ERROR is thrown as ReplayedError. */
  readonly outcome: Extract<Outcome, 'SUCCESS'>;
  readonly fence: bigint;
  /** `fn` ran as a takeover (see Claim.takeover). */
  readonly takeover: boolean;
}

// The server never waits longer than this per Begin.
const MAX_WAIT_PER_CALL_MS = 60_000;

/**
 * Begin (fresh owner per attempt) → STARTED: run `fn`, then Complete with its
 * JSON result; DUPLICATE: return the stored result, or throw ReplayedError for
 * a stored error; IN_USE: Begin again with wait_ms until `deadlineMs`;
 * CONFLICT: throw ConflictError.
 *
 * When `fn` throws: a retryable error (RetryableError or `isRetryable`)
 * releases the claim; any other is stored as {name, message, code?} and
 * replayed to duplicates. Either way the error is rethrown.
 *
 * Also throws: StaleFenceError / OutcomeNotRecordedError (fn ran but its
 * outcome was not recorded: the lease was lost), InUseTimeoutError,
 * DedupRpcError (gRPC failure after retries; with `outcomeUnknown` from
 * Complete, the outcome may have been recorded), CanonicalJsonError (args).
 * Results must be JSON-serializable (undefined becomes null).
 */
export async function withIdempotency<T>(
  calls: IdempotencyCalls,
  options: IdempotencyOptions,
  fn: IdempotentFunction<T>,
): Promise<IdempotencyResult<T>> {
  const hash = argsHash(options.args);
  const key = options.key ?? hash.toString('hex');
  const now = options.now ?? Date.now;
  const pause = options.sleep ?? defaultSleep;
  const newOwner = options.newOwner ?? randomUUID;
  const waitPerCallMs = Math.min(options.waitPerCallMs ?? 10_000, MAX_WAIT_PER_CALL_MS);
  const deadline = now() + (options.deadlineMs ?? 120_000);
  let waitMs = 0;

  for (;;) {
    const owner = newOwner();
    const sentAt = now();
    const begin = await calls.begin({
      namespace: options.namespace,
      key,
      argsHash: hash,
      owner,
      ...(options.leaseMs !== undefined && { leaseMs: options.leaseMs }),
      ...(options.ttlS !== undefined && { ttlS: options.ttlS }),
      waitMs,
    });
    switch (begin.status) {
      case 'STARTED':
        return execute(calls, options, { namespace: options.namespace, key, owner, fence: begin.fence,
          takeover: begin.takeover, attempts: begin.attempts, leaseExpiresAt: begin.leaseExpiresAt }, fn);
      case 'DUPLICATE':
        return replay<T>(options.namespace, key, begin);
      case 'CONFLICT':
        throw new ConflictError(options.namespace, key, begin.fence);
      case 'IN_USE':
        break;
    }
    // A server that answered well before the wait we asked for is not
    // waiting (e.g. it was shutting down): pause so we do not spin on it.
    if (waitMs > 0 && now() - sentAt < waitMs / 2) {
      await pause(Math.max(0, Math.min(Math.max(begin.retryAfterMs, 10), deadline - now())));
    }
    waitMs = Math.floor(Math.min(waitPerCallMs, deadline - now()));
    if (waitMs < 1) throw new InUseTimeoutError(options.namespace, key, begin.fence);
  }
}

async function execute<T>(
  calls: IdempotencyCalls,
  options: IdempotencyOptions,
  claim: Claim,
  fn: IdempotentFunction<T>,
): Promise<IdempotencyResult<T>> {
  let encoded: string;
  try {
    // JSON.stringify inside the try: an unserializable result is stored as
    // an error rather than left to lapse, since the side effect did happen
    // and a takeover would repeat it.
    encoded = JSON.stringify(await fn(claim)) ?? 'null';
  } catch (error) {
    if (error instanceof RetryableError || options.isRetryable?.(error) === true) {
      await calls.release({ namespace: claim.namespace, key: claim.key, fence: claim.fence }).catch(() => {
        // Best effort: the claim lapses when its lease ends, and the caller's
        // own failure is the more useful thing to report.
      });
      throw error;
    }
    await record(calls, options, claim, 'ERROR', JSON.stringify(toStoredError(error)), error);
    throw error;
  }
  await record(calls, options, claim, 'SUCCESS', encoded, undefined);
  // Parse back so the first caller sees exactly what duplicates will see.
  return { result: JSON.parse(encoded) as T, duplicate: false, outcome: 'SUCCESS', fence: claim.fence, takeover: claim.takeover };
}

async function record(
  calls: IdempotencyCalls,
  options: IdempotencyOptions,
  claim: Claim,
  outcome: Outcome,
  result: string,
  cause: unknown,
): Promise<void> {
  const answer = await calls.complete({
    namespace: claim.namespace,
    key: claim.key,
    fence: claim.fence,
    outcome,
    result,
    ...(options.ttlS !== undefined && { ttlS: options.ttlS }),
  });
  const errorOptions = cause === undefined ? undefined : { cause };
  switch (answer.status) {
    case 'OK':
      return;
    case 'STALE_FENCE':
      throw new StaleFenceError(claim.namespace, claim.key, claim.fence, answer.fence, errorOptions);
    case 'NOT_FOUND':
    case 'ALREADY_COMPLETED':
      throw new OutcomeNotRecordedError(answer.status, claim.namespace, claim.key, claim.fence, answer.fence, errorOptions);
  }
}

function replay<T>(namespace: string, key: string, begin: BeginResponse): IdempotencyResult<T> {
  const text = begin.result.toString('utf8');
  if (begin.outcome === 'ERROR') throw new ReplayedError(parseStoredError(text), namespace, key);
  if (begin.outcome !== 'SUCCESS') {
    throw new DedupProtocolError(`DUPLICATE for key "${key}" without an outcome`);
  }
  let result: T;
  try {
    result = JSON.parse(text) as T;
  } catch {
    throw new DedupProtocolError(`stored result for key "${key}" in "${namespace}" is not JSON (written by another tool?)`);
  }
  return { result, duplicate: true, outcome: 'SUCCESS', fence: begin.fence, takeover: false };
}

/** {name, message, code?} of a thrown value: what is stored for a permanent failure. */
export function toStoredError(error: unknown): StoredError {
  if (error instanceof Error) {
    const code: unknown = (error as { code?: unknown }).code;
    const base = { name: error.name, message: error.message };
    return typeof code === 'string' || typeof code === 'number' ? { ...base, code } : base;
  }
  return { name: 'Error', message: String(error) };
}

// Tolerant: a record written by another tool (e.g. dedupctl) still replays
// as an error carrying its raw text.
function parseStoredError(text: string): StoredError {
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === 'object' && parsed !== null) {
      const { name, message, code } = parsed as Record<string, unknown>;
      if (typeof message === 'string') {
        const base = { name: typeof name === 'string' ? name : 'Error', message };
        return typeof code === 'string' || typeof code === 'number' ? { ...base, code } : base;
      }
    }
  } catch {
    // Not JSON: fall through.
  }
  return { name: 'Error', message: text };
}
