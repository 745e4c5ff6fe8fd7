// The wire side: loads dedup.proto at run time (no generated code to drift
// from it) and converts between proto-loader's plain objects and the public
// types in types.ts. Only this file knows proto field names.
import { fileURLToPath } from 'node:url';

import type { MethodDefinition, PackageDefinition } from '@grpc/proto-loader';
import { loadSync } from '@grpc/proto-loader';

import { DedupProtocolError } from './errors.js';
import type {
  BatchItemResult,
  BeginRequest,
  BeginResponse,
  BeginStatus,
  CheckpointInfo,
  CheckpointRequest,
  CheckpointResponse,
  CompleteRequest,
  CompleteResponse,
  DedupRecord,
  FencedStatus,
  ForgetResponse,
  GetResponse,
  KeyRequest,
  Outcome,
  RecordState,
  ReleaseRequest,
  ReleaseResponse,
  RenewRequest,
  RenewResponse,
} from './types.js';

// Copied next to dist/ by scripts/copy-repo-files.mjs from <repo>/proto.
const PROTO_PATH = fileURLToPath(new URL('../../proto/dedup/v1/dedup.proto', import.meta.url));
export const SERVICE_NAME = 'dedup.v1.Dedup';

// 64-bit integers as decimal strings (exact), enums as names, absent fields as
// their defaults, so every response object has every field.
const LOADER_OPTIONS = { keepCase: true, longs: String, enums: String, bytes: Buffer, defaults: true } as const;

let cached: PackageDefinition | undefined;

export function packageDefinition(): PackageDefinition {
  cached ??= loadSync(PROTO_PATH, LOADER_OPTIONS);
  return cached;
}

export type MethodName =
  | 'Begin'
  | 'Complete'
  | 'Release'
  | 'Renew'
  | 'Checkpoint'
  | 'Get'
  | 'Forget'
  | 'BeginBatch'
  | 'CompleteBatch'
  | 'CheckpointBatch';

/** The method's path and (de)serializers, typed by the wire shapes below. */
export function methodDefinition<Req extends object, Res extends object>(name: MethodName): MethodDefinition<Req, Res> {
  const service = packageDefinition()[SERVICE_NAME];
  const method: unknown = service !== undefined && name in service ? (service as Record<string, unknown>)[name] : undefined;
  if (method === undefined) throw new DedupProtocolError(`${SERVICE_NAME}.${name} is not in ${PROTO_PATH}`);
  return method as MethodDefinition<Req, Res>;
}

// ---- Wire shapes (proto field names; what proto-loader reads and writes) ----

type Int64 = string; // longs: String
type EnumName = string | number; // a number when the value is unknown to this proto

export interface BeginRequestWire {
  namespace: string;
  key: string;
  args_hash: Uint8Array;
  owner: string;
  lease_ms: number;
  ttl_s: number;
  wait_ms: number;
  accept_rerun: boolean;
}
export interface CheckpointInfoWire {
  step: string;
  data: Buffer;
  fence: Int64;
  recorded_at: Int64;
}
export interface BeginResponseWire {
  status: EnumName;
  fence: Int64;
  takeover: boolean;
  outcome: EnumName;
  result: Buffer;
  created_at: Int64;
  completed_at: Int64;
  expires_at: Int64;
  lease_expires_at: Int64;
  attempts: number;
  retry_after_ms: number;
  // A message field: null when absent (defaults: true).
  checkpoint: CheckpointInfoWire | null;
  rerun: boolean;
  tombstone_expires_at: Int64;
}
export interface CompleteRequestWire {
  namespace: string;
  key: string;
  fence: Int64;
  outcome: Outcome;
  result: Uint8Array;
  ttl_s: number;
}
export interface CompleteResponseWire {
  status: EnumName;
  fence: Int64;
  expires_at: Int64;
}
export interface ReleaseRequestWire {
  namespace: string;
  key: string;
  fence: Int64;
}
export interface ReleaseResponseWire {
  status: EnumName;
  fence: Int64;
}
export interface RenewRequestWire {
  namespace: string;
  key: string;
  fence: Int64;
  lease_ms: number;
}
export interface RenewResponseWire {
  status: EnumName;
  fence: Int64;
  lease_expires_at: Int64;
  expires_at: Int64;
}
export interface CheckpointRequestWire {
  namespace: string;
  key: string;
  fence: Int64;
  step: string;
  data: Uint8Array;
  lease_ms: number;
}
export interface CheckpointResponseWire {
  status: EnumName;
  fence: Int64;
  lease_expires_at: Int64;
}
export interface KeyRequestWire {
  namespace: string;
  key: string;
}
export interface RecordWire {
  state: EnumName;
  fence: Int64;
  args_hash: Buffer;
  owner: string;
  outcome: EnumName;
  result: Buffer;
  created_at: Int64;
  completed_at: Int64;
  expires_at: Int64;
  lease_expires_at: Int64;
  attempts: number;
  checkpoint: CheckpointInfoWire | null;
}
export interface GetResponseWire {
  found: boolean;
  record: RecordWire | null;
}
export interface ForgetResponseWire {
  existed: boolean;
}

export interface ItemErrorWire {
  code: number;
  message: string;
  reason: string;
  leader: string;
  retry_after_ms: number;
}
export interface BeginBatchRequestWire {
  items: BeginRequestWire[];
}
// A oneof: proto-loader leaves the unset member out (no default).
export interface BeginBatchItemWire {
  response?: BeginResponseWire;
  error?: ItemErrorWire;
}
export interface BeginBatchResponseWire {
  items: BeginBatchItemWire[];
}
export interface CompleteBatchRequestWire {
  items: CompleteRequestWire[];
}
export interface CompleteBatchItemWire {
  response?: CompleteResponseWire;
  error?: ItemErrorWire;
}
export interface CompleteBatchResponseWire {
  items: CompleteBatchItemWire[];
}
export interface CheckpointBatchRequestWire {
  items: CheckpointRequestWire[];
}
export interface CheckpointBatchItemWire {
  response?: CheckpointResponseWire;
  error?: ItemErrorWire;
}
export interface CheckpointBatchResponseWire {
  items: CheckpointBatchItemWire[];
}
// Dedup.Session (a bidirectional stream): the shapes are mapped so that the
// contract stays checked; this client sends its calls as unary and batch
// calls and does not open streams yet.
export interface SessionOpWire {
  id: Int64;
  timeout_ms: number;
  begin?: BeginRequestWire;
  complete?: CompleteRequestWire;
  release?: ReleaseRequestWire;
  renew?: RenewRequestWire;
  checkpoint?: CheckpointRequestWire;
  get?: KeyRequestWire;
}
export interface SessionRequestWire {
  ops: SessionOpWire[];
}
export interface SessionAnswerWire {
  id: Int64;
  begin?: BeginResponseWire;
  complete?: CompleteResponseWire;
  release?: ReleaseResponseWire;
  renew?: RenewResponseWire;
  checkpoint?: CheckpointResponseWire;
  get?: GetResponseWire;
  error?: ItemErrorWire;
}
export interface SessionResponseWire {
  answers: SessionAnswerWire[];
  max_in_flight: number;
}

type FieldSet<T> = { readonly [K in keyof T]-?: true };

/**
 * The fields each wire shape reads or writes, checked against the interfaces
 * at compile time (`satisfies`) and against the loaded proto by a unit test,
 * so a field added to dedup.proto cannot be silently ignored here.
 */
export const WIRE_FIELDS = {
  'dedup.v1.BeginRequest': fields<BeginRequestWire>({
    namespace: true, key: true, args_hash: true, owner: true, lease_ms: true, ttl_s: true, wait_ms: true,
    accept_rerun: true,
  }),
  'dedup.v1.CheckpointInfo': fields<CheckpointInfoWire>({ step: true, data: true, fence: true, recorded_at: true }),
  'dedup.v1.BeginResponse': fields<BeginResponseWire>({
    status: true, fence: true, takeover: true, outcome: true, result: true, created_at: true, completed_at: true,
    expires_at: true, lease_expires_at: true, attempts: true, retry_after_ms: true, checkpoint: true, rerun: true,
    tombstone_expires_at: true,
  }),
  'dedup.v1.CompleteRequest': fields<CompleteRequestWire>({ namespace: true, key: true, fence: true, outcome: true, result: true, ttl_s: true }),
  'dedup.v1.CompleteResponse': fields<CompleteResponseWire>({ status: true, fence: true, expires_at: true }),
  'dedup.v1.ReleaseRequest': fields<ReleaseRequestWire>({ namespace: true, key: true, fence: true }),
  'dedup.v1.ReleaseResponse': fields<ReleaseResponseWire>({ status: true, fence: true }),
  'dedup.v1.RenewRequest': fields<RenewRequestWire>({ namespace: true, key: true, fence: true, lease_ms: true }),
  'dedup.v1.RenewResponse': fields<RenewResponseWire>({ status: true, fence: true, lease_expires_at: true, expires_at: true }),
  'dedup.v1.CheckpointRequest': fields<CheckpointRequestWire>({
    namespace: true, key: true, fence: true, step: true, data: true, lease_ms: true,
  }),
  'dedup.v1.CheckpointResponse': fields<CheckpointResponseWire>({ status: true, fence: true, lease_expires_at: true }),
  'dedup.v1.GetRequest': fields<KeyRequestWire>({ namespace: true, key: true }),
  'dedup.v1.Record': fields<RecordWire>({
    state: true, fence: true, args_hash: true, owner: true, outcome: true, result: true, created_at: true,
    completed_at: true, expires_at: true, lease_expires_at: true, attempts: true, checkpoint: true,
  }),
  'dedup.v1.GetResponse': fields<GetResponseWire>({ found: true, record: true }),
  'dedup.v1.ForgetRequest': fields<KeyRequestWire>({ namespace: true, key: true }),
  'dedup.v1.ForgetResponse': fields<ForgetResponseWire>({ existed: true }),
  'dedup.v1.ItemError': fields<ItemErrorWire>({
    code: true,
    message: true,
    reason: true,
    leader: true,
    retry_after_ms: true,
  }),
  'dedup.v1.BeginBatchRequest': fields<BeginBatchRequestWire>({ items: true }),
  'dedup.v1.BeginBatchResponse': fields<BeginBatchResponseWire>({ items: true }),
  'dedup.v1.BeginBatchResponse.Item': fields<BeginBatchItemWire>({ response: true, error: true }),
  'dedup.v1.CompleteBatchRequest': fields<CompleteBatchRequestWire>({ items: true }),
  'dedup.v1.CompleteBatchResponse': fields<CompleteBatchResponseWire>({ items: true }),
  'dedup.v1.CompleteBatchResponse.Item': fields<CompleteBatchItemWire>({ response: true, error: true }),
  'dedup.v1.CheckpointBatchRequest': fields<CheckpointBatchRequestWire>({ items: true }),
  'dedup.v1.CheckpointBatchResponse': fields<CheckpointBatchResponseWire>({ items: true }),
  'dedup.v1.CheckpointBatchResponse.Item': fields<CheckpointBatchItemWire>({ response: true, error: true }),
  'dedup.v1.SessionOp': fields<SessionOpWire>({
    id: true, timeout_ms: true, begin: true, complete: true, release: true, renew: true, checkpoint: true, get: true,
  }),
  'dedup.v1.SessionRequest': fields<SessionRequestWire>({ ops: true }),
  'dedup.v1.SessionAnswer': fields<SessionAnswerWire>({
    id: true, begin: true, complete: true, release: true, renew: true, checkpoint: true, get: true, error: true,
  }),
  'dedup.v1.SessionResponse': fields<SessionResponseWire>({ answers: true, max_in_flight: true }),
} as const;

function fields<T>(set: FieldSet<T>): readonly string[] {
  return Object.keys(set);
}

// ---- Requests ----

export function beginRequestToWire(r: BeginRequest): BeginRequestWire {
  return {
    namespace: r.namespace,
    key: r.key,
    args_hash: r.argsHash ?? new Uint8Array(0),
    owner: r.owner ?? '',
    lease_ms: uint32(r.leaseMs ?? 0, 'leaseMs'),
    ttl_s: uint32(r.ttlS ?? 0, 'ttlS'),
    wait_ms: uint32(r.waitMs ?? 0, 'waitMs'),
    accept_rerun: r.acceptRerun ?? false,
  };
}

export function completeRequestToWire(r: CompleteRequest): CompleteRequestWire {
  const result = r.result ?? new Uint8Array(0);
  return {
    namespace: r.namespace,
    key: r.key,
    fence: fenceToWire(r.fence),
    outcome: r.outcome,
    result: typeof result === 'string' ? Buffer.from(result, 'utf8') : result,
    ttl_s: uint32(r.ttlS ?? 0, 'ttlS'),
  };
}

export function releaseRequestToWire(r: ReleaseRequest): ReleaseRequestWire {
  return { namespace: r.namespace, key: r.key, fence: fenceToWire(r.fence) };
}

export function renewRequestToWire(r: RenewRequest): RenewRequestWire {
  return { namespace: r.namespace, key: r.key, fence: fenceToWire(r.fence), lease_ms: uint32(r.leaseMs ?? 0, 'leaseMs') };
}

export function checkpointRequestToWire(r: CheckpointRequest): CheckpointRequestWire {
  const data = r.data ?? new Uint8Array(0);
  return {
    namespace: r.namespace,
    key: r.key,
    fence: fenceToWire(r.fence),
    step: r.step,
    data: typeof data === 'string' ? Buffer.from(data, 'utf8') : data,
    lease_ms: uint32(r.leaseMs ?? 0, 'leaseMs'),
  };
}

export function keyRequestToWire(r: KeyRequest): KeyRequestWire {
  return { namespace: r.namespace, key: r.key };
}

// Batch items are converted like the unary requests, so the same checks apply.
export function beginBatchRequestToWire(items: readonly BeginRequest[]): BeginBatchRequestWire {
  return { items: items.map(beginRequestToWire) };
}

export function completeBatchRequestToWire(items: readonly CompleteRequest[]): CompleteBatchRequestWire {
  return { items: items.map(completeRequestToWire) };
}

export function checkpointBatchRequestToWire(items: readonly CheckpointRequest[]): CheckpointBatchRequestWire {
  return { items: items.map(checkpointRequestToWire) };
}

// Checked here because protobufjs would otherwise wrap or truncate silently.
function uint32(value: number, field: string): number {
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) {
    throw new RangeError(`${field} must be an integer in 0..4294967295, got ${value}`);
  }
  return value;
}

function fenceToWire(fence: bigint): Int64 {
  if (fence < 0n || fence > 0xffffffffffffffffn) throw new RangeError(`fence must be a uint64, got ${fence}`);
  return fence.toString();
}

// ---- Responses ----

const BEGIN_STATUSES: readonly BeginStatus[] = ['STARTED', 'IN_USE', 'CONFLICT', 'DUPLICATE', 'EXPIRED'];
const FENCED_STATUSES: readonly FencedStatus[] = ['OK', 'STALE_FENCE', 'NOT_FOUND', 'ALREADY_COMPLETED'];
const RECORD_STATES: readonly RecordState[] = ['IN_FLIGHT', 'COMPLETED'];
const OUTCOMES: readonly Outcome[] = ['SUCCESS', 'ERROR'];

export function beginResponseFromWire(w: BeginResponseWire): BeginResponse {
  return {
    status: enumFromWire(w.status, BEGIN_STATUSES, 'BeginResponse.status'),
    fence: BigInt(w.fence),
    takeover: w.takeover,
    outcome: outcomeFromWire(w.outcome, 'BeginResponse.outcome'),
    result: w.result,
    createdAt: Number(w.created_at),
    completedAt: Number(w.completed_at),
    expiresAt: Number(w.expires_at),
    leaseExpiresAt: Number(w.lease_expires_at),
    attempts: w.attempts,
    retryAfterMs: w.retry_after_ms,
    checkpoint: checkpointFromWire(w.checkpoint),
    rerun: w.rerun,
    tombstoneExpiresAt: Number(w.tombstone_expires_at),
  };
}

export function checkpointResponseFromWire(w: CheckpointResponseWire): CheckpointResponse {
  return {
    status: enumFromWire(w.status, FENCED_STATUSES, 'CheckpointResponse.status'),
    fence: BigInt(w.fence),
    leaseExpiresAt: Number(w.lease_expires_at),
  };
}

// proto-loader gives null (or, from an older server, undefined) for an unset message.
function checkpointFromWire(w: CheckpointInfoWire | null | undefined): CheckpointInfo | null {
  if (w === null || w === undefined) return null;
  return { step: w.step, data: w.data, fence: BigInt(w.fence), recordedAt: Number(w.recorded_at) };
}

export function completeResponseFromWire(w: CompleteResponseWire): CompleteResponse {
  return {
    status: enumFromWire(w.status, FENCED_STATUSES, 'CompleteResponse.status'),
    fence: BigInt(w.fence),
    expiresAt: Number(w.expires_at),
  };
}

export function releaseResponseFromWire(w: ReleaseResponseWire): ReleaseResponse {
  return { status: enumFromWire(w.status, FENCED_STATUSES, 'ReleaseResponse.status'), fence: BigInt(w.fence) };
}

export function renewResponseFromWire(w: RenewResponseWire): RenewResponse {
  return {
    status: enumFromWire(w.status, FENCED_STATUSES, 'RenewResponse.status'),
    fence: BigInt(w.fence),
    leaseExpiresAt: Number(w.lease_expires_at),
    expiresAt: Number(w.expires_at),
  };
}

export function getResponseFromWire(w: GetResponseWire): GetResponse {
  if (!w.found || w.record === null) return { record: null };
  return { record: recordFromWire(w.record) };
}

export function forgetResponseFromWire(w: ForgetResponseWire): ForgetResponse {
  return { existed: w.existed };
}

export function beginBatchResponseFromWire(w: BeginBatchResponseWire, requestItems: number): BatchItemResult<BeginResponse>[] {
  return batchFromWire(w.items, requestItems, 'BeginBatchResponse', beginResponseFromWire);
}

export function completeBatchResponseFromWire(
  w: CompleteBatchResponseWire,
  requestItems: number,
): BatchItemResult<CompleteResponse>[] {
  return batchFromWire(w.items, requestItems, 'CompleteBatchResponse', completeResponseFromWire);
}

export function checkpointBatchResponseFromWire(
  w: CheckpointBatchResponseWire,
  requestItems: number,
): BatchItemResult<CheckpointResponse>[] {
  return batchFromWire(w.items, requestItems, 'CheckpointBatchResponse', checkpointResponseFromWire);
}

// Answers pair with request items by position, so a different count cannot be
// trusted at all; an item with neither member set is from a newer server
// (a new oneof member) and, like an unknown enum, is refused rather than
// guessed at.
function batchFromWire<W, T>(
  items: readonly { response?: W; error?: ItemErrorWire }[],
  requestItems: number,
  messageName: string,
  answerFromWire: (w: W) => T,
): BatchItemResult<T>[] {
  if (items.length !== requestItems) {
    throw new DedupProtocolError(`${messageName} has ${items.length} items for ${requestItems} requested`);
  }
  return items.map((item, i): BatchItemResult<T> => {
    if (item.response !== undefined && item.response !== null) return { ok: true, answer: answerFromWire(item.response) };
    if (item.error !== undefined && item.error !== null) {
      const { code, message, reason, leader, retry_after_ms: retryAfterMs } = item.error;
      // An older server sends no reason, leader nor delay (proto-loader: "" and 0).
      return {
        ok: false,
        code,
        message,
        ...(reason ? { reason } : {}),
        ...(leader ? { leader } : {}),
        ...(retryAfterMs ? { retryAfterMs } : {}),
      };
    }
    throw new DedupProtocolError(`${messageName}.items[${i}] has neither a response nor an error`);
  });
}

function recordFromWire(w: RecordWire): DedupRecord {
  return {
    state: enumFromWire(w.state, RECORD_STATES, 'Record.state'),
    fence: BigInt(w.fence),
    argsHash: w.args_hash,
    owner: w.owner,
    outcome: outcomeFromWire(w.outcome, 'Record.outcome'),
    result: w.result,
    createdAt: Number(w.created_at),
    completedAt: Number(w.completed_at),
    expiresAt: Number(w.expires_at),
    leaseExpiresAt: Number(w.lease_expires_at),
    attempts: w.attempts,
    checkpoint: checkpointFromWire(w.checkpoint),
  };
}

function outcomeFromWire(value: EnumName, field: string): Outcome | null {
  return value === 'OUTCOME_UNSPECIFIED' || value === 0 ? null : enumFromWire(value, OUTCOMES, field);
}

// An unknown value means a newer server: fail loudly rather than guess (e.g.
// treating an unknown Begin status as STARTED would run the side effect).
function enumFromWire<T extends string>(value: EnumName, allowed: readonly T[], field: string): T {
  const found = allowed.find((name) => name === value);
  if (found === undefined) throw new DedupProtocolError(`unexpected ${field} ${String(value)} from the server`);
  return found;
}
