// Public API of @dedup/client.
export { argsHash, argsHashHex } from './args-hash.js';
export { type BackoffOptions, backoffCeilingMs, DEFAULT_BACKOFF, fullJitterDelayMs } from './backoff.js';
export { CanonicalJsonError, canonicalize, compareUtf16, type JsonValue } from './canonical-json.js';
export { DedupClient, type DedupClientOptions } from './client.js';
export { DEDUP_ENV, environmentDefaults, type EnvironmentOptions } from './environment.js';
export { type CoalesceOptions } from './coalescer.js';
export {
  ConflictError,
  DedupProtocolError,
  DedupRpcError,
  type DedupRpcErrorOptions,
  ExpiredError,
  InUseTimeoutError,
  isOutcomeUnknown,
  type LostClaimCall,
  OutcomeNotRecordedError,
  ReplayedError,
  RetryableError,
  StaleFenceError,
  type StoredError,
} from './errors.js';
export {
  type Claim,
  type ClaimCheckpoint,
  type IdempotencyCalls,
  type IdempotencyOptions,
  type IdempotencyResult,
  type IdempotentFunction,
  toStoredError,
  withIdempotency,
} from './idempotency.js';
export { isUnavailable, retryUnavailable, type RetryPolicy } from './retry.js';
export {
  BearerToken,
  isLoopbackAddress,
  openChannel,
  type PemSource,
  type SecurityOptions,
  type TlsOptions,
} from './security.js';
export { type ShardGroup, type ShardMap } from './shard-map.js';
export { SLOT_COUNT, slotOf } from './slot.js';
export type * from './types.js';
