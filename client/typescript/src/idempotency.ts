// withIdempotency: run a side effect at most once per (namespace, key) across
// every process that shares a dedupd, and replay its outcome (errors
// included) to every retry.
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';

import { argsHash } from './args-hash.js';
import {
  ConflictError,
  DedupProtocolError,
  ExpiredError,
  InUseTimeoutError,
  OutcomeNotRecordedError,
  ReplayedError,
  RetryableError,
  StaleFenceError,
  type StoredError,
} from './errors.js';
import { ClaimLoss, LeaseKeeper } from './lease-keeper.js';
import { sleep as defaultSleep } from './retry.js';
import type {
  BeginRequest,
  BeginResponse,
  CheckpointInfo,
  CheckpointRequest,
  CheckpointResponse,
  CompleteRequest,
  CompleteResponse,
  Outcome,
  ReleaseRequest,
  ReleaseResponse,
  RenewRequest,
  RenewResponse,
} from './types.js';

/**
 * The calls withIdempotency needs; DedupClient has them (tests may pass a
 * fake). Without `renew` the lease is not renewed; without `checkpoint`,
 * claim.checkpoint rejects.
 */
export interface IdempotencyCalls {
  begin(request: BeginRequest): Promise<BeginResponse>;
  complete(request: CompleteRequest): Promise<CompleteResponse>;
  release(request: ReleaseRequest): Promise<ReleaseResponse>;
  renew?(request: RenewRequest): Promise<RenewResponse>;
  checkpoint?(request: CheckpointRequest): Promise<CheckpointResponse>;
}

export interface IdempotencyOptions {
  /** Scope of the key, e.g. "<client>:<tool>". */
  readonly namespace: string;
  /** Names the logical operation. Default: the hex SHA-256 of the canonical args, so equal args dedupe. */
  readonly key?: string;
  /** The tool arguments (JSON values only); their canonical hash detects a key reused for other args. */
  readonly args: unknown;
  /**
   * Lease of each claim in ms. It is renewed every leaseMs/3 while `fn` runs
   * (see `autoRenew`), so it bounds how long a crashed or frozen owner holds
   * the key, not how long `fn` may run. Default: the server's (60 s).
   */
  readonly leaseMs?: number;
  /**
   * Renew the lease in the background while `fn` runs, and abort
   * `claim.signal` when a renewal is refused (the claim is lost). Default
   * true. With false, `fn` must finish within the lease or renew it itself.
   */
  readonly autoRenew?: boolean;
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
  /**
   * When the operation completed so long ago that its record expired (only
   * a tombstone is left): false (default) rejects with ExpiredError and runs
   * nothing; true runs `fn` again (claim.rerun and result.rerun are true).
   * Set it only where running the side effect a second time is acceptable.
   */
  readonly acceptRerun?: boolean;
  /** Owner id per claim attempt. Default crypto.randomUUID. */
  readonly newOwner?: () => string;
  /** Clock and sleep for the IN_USE loop (injectable for tests). */
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
}

/**
 * The last checkpoint of an earlier execution of this operation, as `fn`
 * receives it on a takeover (or re-entry). Helpers store checkpoint data as
 * UTF-8 JSON, like results.
 */
export interface ClaimCheckpoint {
  readonly step: string;
  /**
   * The data, JSON-decoded; undefined when the stored bytes are not JSON
   * (written by another tool with client.checkpoint).
   */
  readonly data: unknown;
  /** The stored bytes. */
  readonly raw: Buffer;
  /** The fence of the execution that recorded it. */
  readonly fence: bigint;
  /** Server clock, Unix ms. */
  readonly recordedAt: number;
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
  /** Server clock, Unix ms: when the lease Begin granted runs out (renewals push it on). */
  readonly leaseExpiresAt: number;
  /** The operation had completed and expired, and acceptRerun made it run again. */
  readonly rerun: boolean;
  /**
   * The last checkpoint an earlier execution recorded (a takeover: resume
   * from it instead of starting from scratch), or null.
   */
  readonly lastCheckpoint: ClaimCheckpoint | null;
  /**
   * Aborts when the claim is lost while `fn` runs: a renewal or a
   * checkpoint was refused (STALE_FENCE: another owner took over after the
   * lease lapsed, e.g. this process was frozen; NOT_FOUND: the record
   * expired or was forgotten). Its `reason` is the StaleFenceError /
   * OutcomeNotRecordedError that withIdempotency then rejects with. Pass it
   * to cancellable work (fetch, timers) and check it before an irreversible
   * step; pass `fence` to the downstream system too, which alone can refuse
   * a late write for certain. With autoRenew false only a checkpoint can
   * abort it.
   */
  readonly signal: AbortSignal;
  /**
   * Records progress: `step` names it (1..128 printable ASCII bytes), `data`
   * (any JSON value; default null) is stored as UTF-8 JSON, at most 64 KiB.
   * A later owner of this operation (a takeover) gets it as lastCheckpoint.
   * Also renews the lease when `leaseMs` was given. Resolves once recorded.
   * Refused (STALE_FENCE, NOT_FOUND, ALREADY_COMPLETED): the claim is lost,
   * `signal` aborts, and it rejects with the signal's reason (let it
   * propagate: withIdempotency rejects with it and records nothing). Other
   * failures (a DedupRpcError after retries) reject without losing the claim.
   */
  checkpoint(step: string, data?: unknown): Promise<void>;
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
  /** `fn` ran again after its earlier completion expired (acceptRerun). */
  readonly rerun: boolean;
}

// The server never waits longer than this per Begin.
const MAX_WAIT_PER_CALL_MS = 60_000;

/**
 * Begin (fresh owner per attempt) → STARTED: run `fn`, then Complete with its
 * JSON result; DUPLICATE: return the stored result, or throw ReplayedError for
 * a stored error; IN_USE: Begin again with wait_ms until `deadlineMs`;
 * CONFLICT: throw ConflictError; EXPIRED (it ran, but so long ago that its
 * result is gone): throw ExpiredError, never a silent re-run, unless
 * `acceptRerun` (then the server answers STARTED and `fn` runs again).
 *
 * While `fn` runs its lease is renewed every lease/3 (`autoRenew`); a
 * renewal refused (the claim lost) aborts `claim.signal`, and whatever `fn`
 * then returns or throws, nothing is completed or released: the call rejects
 * with the signal's reason (when `fn` threw something else, with an error of
 * the same kind whose cause is `fn`'s error). It never reports success.
 *
 * When `fn` throws: a retryable error (RetryableError or `isRetryable`)
 * releases the claim; any other is stored as {name, message, code?} and
 * replayed to duplicates. Either way the error is rethrown.
 *
 * Also throws: StaleFenceError / OutcomeNotRecordedError (fn ran but its
 * outcome was not recorded: the lease was lost; `call` says whether Complete,
 * a renewal or a checkpoint found out), InUseTimeoutError,
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
    const grantedAt = performance.now();
    const begin = await calls.begin({
      namespace: options.namespace,
      key,
      argsHash: hash,
      owner,
      ...(options.leaseMs !== undefined && { leaseMs: options.leaseMs }),
      ...(options.ttlS !== undefined && { ttlS: options.ttlS }),
      waitMs,
      ...(options.acceptRerun === true && { acceptRerun: true }),
    });
    switch (begin.status) {
      case 'STARTED':
        return execute(calls, options, begin, { namespace: options.namespace, key, owner, grantedAt }, fn);
      case 'DUPLICATE':
        return replay<T>(options.namespace, key, begin);
      case 'CONFLICT':
        throw new ConflictError(options.namespace, key, begin.fence);
      case 'EXPIRED':
        throw new ExpiredError(
          options.namespace,
          key,
          begin.fence,
          begin.outcome,
          begin.createdAt,
          begin.completedAt,
          begin.attempts,
          begin.tombstoneExpiresAt,
        );
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

// Renewal cadence when the lease length cannot be known (a takeover without
// leaseMs: the server's default lease is not in its answer).
const UNKNOWN_LEASE_RENEW_INTERVAL_MS = 1000;

/** Ms between renewals: a third of the lease, so two may fail before it lapses. */
function renewIntervalMs(options: IdempotencyOptions, begin: BeginResponse): number {
  // On a first claim the record was created with the lease, both on the
  // server's clock; a takeover keeps the first claim's createdAt.
  const leaseMs =
    options.leaseMs ?? (begin.attempts === 1 ? begin.leaseExpiresAt - begin.createdAt : UNKNOWN_LEASE_RENEW_INTERVAL_MS * 3);
  return Math.max(1, Math.floor(leaseMs / 3));
}

async function execute<T>(
  calls: IdempotencyCalls,
  options: IdempotencyOptions,
  begin: BeginResponse,
  started: { namespace: string; key: string; owner: string; grantedAt: number },
  fn: IdempotentFunction<T>,
): Promise<IdempotencyResult<T>> {
  const { namespace, key, owner, grantedAt } = started;
  const loss = new ClaimLoss({ namespace, key, fence: begin.fence });
  const keeper =
    options.autoRenew !== false && calls.renew !== undefined
      ? new LeaseKeeper(
          calls.renew.bind(calls),
          {
            namespace,
            key,
            fence: begin.fence,
            leaseMs: options.leaseMs,
            intervalMs: renewIntervalMs(options, begin),
            grantedAt,
          },
          loss,
        )
      : undefined;
  const claim: Claim = {
    namespace,
    key,
    owner,
    fence: begin.fence,
    takeover: begin.takeover,
    attempts: begin.attempts,
    leaseExpiresAt: begin.leaseExpiresAt,
    rerun: begin.rerun,
    lastCheckpoint: claimCheckpoint(begin.checkpoint),
    signal: loss.signal,
    checkpoint: (step, data) => checkpoint(calls, options, loss, begin.fence, { namespace, key, step, data }),
  };
  let encoded: string;
  try {
    // JSON.stringify inside the try: an unserializable result is stored as
    // an error rather than left to lapse, since the side effect did happen
    // and a takeover would repeat it.
    encoded = JSON.stringify(await fn(claim)) ?? 'null';
  } catch (error) {
    keeper?.stop();
    // Lost: Complete and Release would be refused too (fences never go back).
    if (loss.lostAnswer !== undefined) throw error === claim.signal.reason ? error : loss.lostError(error);
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
  keeper?.stop();
  if (loss.lostAnswer !== undefined) throw claim.signal.reason;
  await record(calls, options, claim, 'SUCCESS', encoded, undefined);
  // Parse back so the first caller sees exactly what duplicates will see.
  return {
    result: JSON.parse(encoded) as T,
    duplicate: false,
    outcome: 'SUCCESS',
    fence: claim.fence,
    takeover: claim.takeover,
    rerun: claim.rerun,
  };
}

/** claim.checkpoint: JSON data, the claim's lease; a refusal loses the claim. */
async function checkpoint(
  calls: IdempotencyCalls,
  options: IdempotencyOptions,
  loss: ClaimLoss,
  fence: bigint,
  progress: { namespace: string; key: string; step: string; data: unknown },
): Promise<void> {
  // Already lost: the server would refuse it too.
  loss.signal.throwIfAborted();
  if (calls.checkpoint === undefined) throw new TypeError('claim.checkpoint needs calls with checkpoint()');
  const { namespace, key, step, data } = progress;
  const answer = await calls.checkpoint({
    namespace,
    key,
    fence,
    step,
    data: JSON.stringify(data) ?? 'null',
    ...(options.leaseMs !== undefined && { leaseMs: options.leaseMs }),
  });
  if (answer.status === 'OK') return;
  loss.lose(answer.status, answer.fence, 'Checkpoint');
  loss.signal.throwIfAborted();
}

function claimCheckpoint(info: CheckpointInfo | null): ClaimCheckpoint | null {
  if (info === null) return null;
  let data: unknown;
  try {
    data = JSON.parse(info.data.toString('utf8'));
  } catch {
    data = undefined; // Not JSON: written by another tool; `raw` has the bytes.
  }
  return { step: info.step, data, raw: info.data, fence: info.fence, recordedAt: info.recordedAt };
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
  return { result, duplicate: true, outcome: 'SUCCESS', fence: begin.fence, takeover: false, rerun: false };
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
