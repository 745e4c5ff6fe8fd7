// How DedupClient reads the answers of its RPCs: a failed call as a
// DedupRpcError carrying its trailers, a failed batch RPC as each item's
// result, item numbers of a split batch, and whether a server lacks
// CheckpointBatch.
import { type Metadata, type ServiceError, status as GrpcStatus } from '@grpc/grpc-js';

import { DedupRpcError, grpcCodeName } from './errors.js';
import { serverRetryDelayMs } from './retry-info.js';
import type { BatchItemResult } from './types.js';
import type * as wire from './wire.js';

/** An item error of a batch RPC sent as items[j], as the caller's items[index]. */
export function renumbered<Answer>(result: BatchItemResult<Answer>, j: number, index: number): BatchItemResult<Answer> {
  const prefix = `items[${j}]`;
  if (result.ok || j === index || !result.message.startsWith(prefix)) return result;
  return { ...result, message: `items[${index}]${result.message.slice(prefix.length)}` };
}

/** A failed RPC's error as the result of each of its items. */
export function itemError(error: unknown): BatchItemResult<never> {
  if (error instanceof DedupRpcError) {
    return error.outcomeUnknown
      ? { ok: false, code: error.code, message: error.details, outcomeUnknown: true }
      : { ok: false, code: error.code, message: error.details };
  }
  return { ok: false, code: GrpcStatus.UNKNOWN, message: String(error) };
}

/**
 * A whole CheckpointBatch refused because the server does not have it:
 * UNIMPLEMENTED, or, from every dedupd that has Checkpoint but not
 * CheckpointBatch (its interceptor for unparseable requests rewrites the
 * UNIMPLEMENTED of an unknown dedup.v1 method; server/unparseable_requests.cc),
 * INVALID_ARGUMENT "request: cannot be parsed as the request of ...". Both
 * also answer a request the server cannot parse (a string that is not UTF-8):
 * see `parseable`.
 */
export function isWithoutBatchMethod(error: unknown): error is DedupRpcError {
  if (!(error instanceof DedupRpcError)) return false;
  if (error.code === GrpcStatus.UNIMPLEMENTED) return true;
  return error.code === GrpcStatus.INVALID_ARGUMENT && error.details.startsWith(UNPARSED_REQUEST_PREFIX);
}
const UNPARSED_REQUEST_PREFIX = 'request: cannot be parsed as the request of ';

// A lone surrogate: protobufjs writes it as bytes that are not UTF-8, which
// the server cannot parse as a proto3 string.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Whether the server can parse `item`: its strings encode as valid UTF-8. */
export function parseable(item: wire.CheckpointRequestWire): boolean {
  return ![item.namespace, item.key, item.step].some((text) => LONE_SURROGATE.test(text));
}

/** The error with what its trailing metadata says: the leader's address, an unknown outcome. */
export function rpcError(method: string, error: ServiceError): DedupRpcError {
  const leader = trailer(error, 'dedup-leader');
  const outcomeUnknown = error.code === GrpcStatus.ABORTED && trailer(error, 'dedup-outcome') === 'unknown';
  const retryDelayMs = serverRetryDelayMs(error.code, error.metadata as Metadata | undefined);
  return new DedupRpcError(method, error.code, grpcCodeName(error.code), error.details, {
    cause: error,
    outcomeUnknown,
    ...(leader !== undefined && leader !== '' && { leader }),
    ...(retryDelayMs !== undefined && { retryDelayMs }),
  });
}

export function trailer(error: ServiceError, key: string): string | undefined {
  // Absent on errors made by the client itself (e.g. a refused connection).
  const value = (error.metadata as Metadata | undefined)?.get(key)[0];
  return value === undefined ? undefined : value.toString();
}
