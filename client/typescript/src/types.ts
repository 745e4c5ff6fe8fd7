// The public request and response shapes of dedup.v1.Dedup, in TypeScript
// terms: camelCase fields, enum names as string unions, fences as bigint
// (uint64 on the wire; a number would lose precision past 2^53), timestamps as
// Unix milliseconds of the SERVER's clock (number: exact until year 287396).
// wire.ts converts; the proto file stays the single definition of the API.

/** How an execution ended. */
export type Outcome = 'SUCCESS' | 'ERROR';

/**
 * Begin's answers (all travel in OK responses; none is a gRPC error).
 * EXPIRED: the operation completed so long ago that its record (and result)
 * expired; only a tombstone says when and how it ran. Nothing was started.
 */
export type BeginStatus = 'STARTED' | 'IN_USE' | 'CONFLICT' | 'DUPLICATE' | 'EXPIRED';

/** Answers of the fenced calls Complete, Release, Renew and Checkpoint. */
export type FencedStatus = 'OK' | 'STALE_FENCE' | 'NOT_FOUND' | 'ALREADY_COMPLETED';

export type RecordState = 'IN_FLIGHT' | 'COMPLETED';

export interface BeginRequest {
  readonly namespace: string;
  readonly key: string;
  /** Digest of the arguments (see argsHash); a different one for the same key gets CONFLICT. */
  readonly argsHash?: Uint8Array;
  /** Id of this attempt (a UUID). Retries of this Begin reuse it, so a lost answer is re-entered. */
  readonly owner?: string;
  /** 0 or absent: server default. */
  readonly leaseMs?: number;
  /** 0 or absent: server default. */
  readonly ttlS?: number;
  /** Wait this long for another owner's outcome before answering IN_USE (server allows up to 60 s). */
  readonly waitMs?: number;
  /**
   * When only the tombstone of an expired completed record is left: false or
   * absent answers EXPIRED (nothing runs); true starts the operation again
   * (STARTED with a higher fence, `rerun` true). Only when running the side
   * effect a second time is acceptable.
   */
  readonly acceptRerun?: boolean;
}

/** The last progress an owner recorded with checkpoint(). */
export interface CheckpointInfo {
  readonly step: string;
  readonly data: Buffer;
  /** Fence of the execution that recorded it (lower than the current one after a takeover). */
  readonly fence: bigint;
  /** Server clock, Unix ms. */
  readonly recordedAt: number;
}

export interface BeginResponse {
  readonly status: BeginStatus;
  readonly fence: bigint;
  /** STARTED only: a previous owner's lease ran out; its attempt may have partly run. */
  readonly takeover: boolean;
  /** DUPLICATE and EXPIRED; null otherwise. */
  readonly outcome: Outcome | null;
  /** DUPLICATE only: the stored result (success payload or error description). EXPIRED: empty. */
  readonly result: Buffer;
  readonly createdAt: number;
  /** DUPLICATE and EXPIRED: when the outcome was recorded. */
  readonly completedAt: number;
  readonly expiresAt: number;
  readonly leaseExpiresAt: number;
  readonly attempts: number;
  /** IN_USE only. */
  readonly retryAfterMs: number;
  /** STARTED after an earlier execution recorded progress (a takeover, or re-entry): its last checkpoint; else null. */
  readonly checkpoint: CheckpointInfo | null;
  /** STARTED only: the operation had completed and expired, and acceptRerun made it run again. */
  readonly rerun: boolean;
  /** EXPIRED only: until when the tombstone is kept (server clock, Unix ms); 0 otherwise. */
  readonly tombstoneExpiresAt: number;
}

export interface CompleteRequest {
  readonly namespace: string;
  readonly key: string;
  readonly fence: bigint;
  readonly outcome: Outcome;
  /** Replayed to duplicates; a string is sent as UTF-8. */
  readonly result?: Uint8Array | string;
  /** 0 or absent: keep the TTL given at Begin. */
  readonly ttlS?: number;
}

export interface CompleteResponse {
  readonly status: FencedStatus;
  /** The record's current fence (tells who took over on STALE_FENCE). */
  readonly fence: bigint;
  readonly expiresAt: number;
}

export interface ReleaseRequest {
  readonly namespace: string;
  readonly key: string;
  readonly fence: bigint;
}

export interface ReleaseResponse {
  readonly status: FencedStatus;
  readonly fence: bigint;
}

export interface RenewRequest {
  readonly namespace: string;
  readonly key: string;
  readonly fence: bigint;
  /** New lease length from now; 0 or absent: server default. */
  readonly leaseMs?: number;
}

export interface RenewResponse {
  readonly status: FencedStatus;
  readonly fence: bigint;
  readonly leaseExpiresAt: number;
  readonly expiresAt: number;
}

export interface CheckpointRequest {
  readonly namespace: string;
  readonly key: string;
  /** The fence Begin returned. */
  readonly fence: bigint;
  /** Names the progress made, e.g. "payment-captured" (1..128 printable ASCII bytes). */
  readonly step: string;
  /** What the next owner needs to resume (at most 64 KiB); a string is sent as UTF-8. */
  readonly data?: Uint8Array | string;
  /** Non-zero: also renews the lease to this many ms from now, as renew would. 0 or absent: lease unchanged. */
  readonly leaseMs?: number;
}

export interface CheckpointResponse {
  /**
   * OK: recorded (replaces the previous checkpoint); STALE_FENCE, NOT_FOUND,
   * ALREADY_COMPLETED: nothing recorded, the claim is lost.
   */
  readonly status: FencedStatus;
  /** The record's current fence. */
  readonly fence: bigint;
  /** OK only: when the lease runs out (renewed when leaseMs was given). */
  readonly leaseExpiresAt: number;
}

export interface KeyRequest {
  readonly namespace: string;
  readonly key: string;
}

export interface DedupRecord {
  readonly state: RecordState;
  readonly fence: bigint;
  readonly argsHash: Buffer;
  readonly owner: string;
  /** COMPLETED only; null otherwise. */
  readonly outcome: Outcome | null;
  readonly result: Buffer;
  readonly createdAt: number;
  readonly completedAt: number;
  readonly expiresAt: number;
  readonly leaseExpiresAt: number;
  readonly attempts: number;
  /** IN_FLIGHT only: the last checkpoint, when one was recorded; else null. */
  readonly checkpoint: CheckpointInfo | null;
}

export interface GetResponse {
  /** null when there is no live record (absent or expired). */
  readonly record: DedupRecord | null;
}

export interface ForgetResponse {
  /** True when a live record was removed. */
  readonly existed: boolean;
}

/** A Begin in a batch: as BeginRequest without waitMs (a batch never waits, so one busy key cannot hold the others). */
export type BeginBatchItem = Omit<BeginRequest, 'waitMs'>;

/** A Complete in a batch: as CompleteRequest. */
export type CompleteBatchItem = CompleteRequest;

/** A Checkpoint in a batch: as CheckpointRequest. */
export type CheckpointBatchItem = CheckpointRequest;

/**
 * One item's result in a batch: the server's answer (which may be any answer
 * status, as for the unary call), or why the server refused that item alone.
 * Nothing was done for a refused item unless `outcomeUnknown` says so.
 */
export type BatchItemResult<T> =
  | { readonly ok: true; readonly answer: T }
  | {
      readonly ok: false;
      /** gRPC status code (grpc-js `status` enum), e.g. 3 for INVALID_ARGUMENT. */
      readonly code: number;
      /** The server's message, e.g. "items[4].key: ...". */
      readonly message: string;
      /**
       * Why, for programs (ItemError.reason), when the server gave a reason:
       * "RESULT_BUDGET" for a Begin left out of an answer that already held
       * the server's --max_batch_response_bytes of stored results (nothing
       * happened; the client asks again in smaller batches by itself).
       */
      readonly reason?: string;
      /**
       * The client address ("host:port") of the leader of the item's group,
       * when the item was refused UNAVAILABLE by a node that does not lead
       * it and knows the leader (ItemError.leader; newer servers only).
       */
      readonly leader?: string;
      /**
       * How long to wait before sending the item again, when the server
       * named a delay (ItemError.retry_after_ms: a tenant over its limits;
       * newer servers only).
       */
      readonly retryAfterMs?: number;
      /**
       * Present (true, with code ABORTED) when the item may or may not have
       * taken effect: its outcome was unknown (a leader change) and safe
       * retries did not settle it. Otherwise nothing was done for the item.
       */
      readonly outcomeUnknown?: true;
    };

/** Per-call options. */
export interface CallOptions {
  /**
   * Deadline of each attempt in ms (Begin adds its waitMs), kept when a
   * follower redirects the attempt to the leader. Default: the client's deadlineMs.
   */
  readonly deadlineMs?: number;
}
