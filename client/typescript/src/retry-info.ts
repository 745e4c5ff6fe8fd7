// The server's "retry after" on a refusal (the same rule as the C++
// client's client/retry_delay.h). dedupd refuses a tenant over its limits
// (--tenants_file "limits") with RESOURCE_EXHAUSTED and a
// `grpc-status-details-bin` trailer: a serialized google.rpc.Status whose
// details hold an Any "type.googleapis.com/google.rpc.RetryInfo"
// (proto/dedup/v1/error_details.proto has the same fields). The client waits
// that long and tries again, as an attempt like any other. A
// RESOURCE_EXHAUSTED without it (a message size limit) is not "come back
// later" and keeps its own handling.
//
// Decoded by hand: four tiny messages of the stable googleapis shape, and
// proto-loader (which wire.ts uses) gives (de)serializers for methods only.
// Unknown fields are skipped, so a server adding details does not break it.
import { type Metadata, status as GrpcStatus } from '@grpc/grpc-js';

export const STATUS_DETAILS_KEY = 'grpc-status-details-bin';
export const RETRY_INFO_TYPE_URL = 'type.googleapis.com/google.rpc.RetryInfo';
/** So a wrong server cannot park a client for hours. */
export const MAX_SERVER_RETRY_DELAY_MS = 30_000;

/**
 * The delay in ms a failed call's trailers ask for: only for
 * RESOURCE_EXHAUSTED with a RetryInfo in `grpc-status-details-bin`, clamped
 * to [0, capMs]; undefined otherwise (no trailer, no RetryInfo, or bytes that
 * do not parse).
 */
export function serverRetryDelayMs(
  code: number,
  metadata: Metadata | undefined,
  capMs = MAX_SERVER_RETRY_DELAY_MS,
): number | undefined {
  if (code !== GrpcStatus.RESOURCE_EXHAUSTED || metadata === undefined) return undefined;
  const value = metadata.get(STATUS_DETAILS_KEY)[0];
  if (value === undefined || typeof value === 'string') return undefined;
  const delayMs = retryDelayFromStatusDetails(value);
  return delayMs === undefined ? undefined : Math.min(Math.max(delayMs, 0), capMs);
}

/** The RetryInfo delay (ms, unclamped) in a serialized google.rpc.Status, or undefined. */
export function retryDelayFromStatusDetails(bytes: Uint8Array): number | undefined {
  try {
    for (const [field, any] of fields(bytes)) {
      if (field !== 3 || !(any instanceof Uint8Array)) continue; // details: repeated Any
      let typeUrl = '';
      let value: Uint8Array = new Uint8Array(0);
      for (const [f, v] of fields(any)) {
        if (f === 1 && v instanceof Uint8Array) typeUrl = Buffer.from(v).toString('utf8');
        else if (f === 2 && v instanceof Uint8Array) value = v;
      }
      if (typeUrl !== RETRY_INFO_TYPE_URL) continue;
      let seconds = 0;
      let nanos = 0;
      for (const [f, v] of fields(value)) {
        if (f !== 1 || !(v instanceof Uint8Array)) continue; // retry_delay: Duration
        for (const [df, dv] of fields(v)) {
          if (df === 1 && typeof dv === 'number') seconds = signed(dv);
          else if (df === 2 && typeof dv === 'number') nanos = signed(dv);
        }
      }
      return seconds * 1000 + nanos / 1e6;
    }
  } catch {
    return undefined; // malformed: as if there were no RetryInfo
  }
  return undefined;
}

/** (field number, varint as a number | length-delimited bytes) pairs; fixed-width fields are skipped. */
function* fields(bytes: Uint8Array): Generator<[number, number | Uint8Array]> {
  let at = 0;
  const varint = (): number => {
    let value = 0;
    for (let shift = 0; shift < 70; shift += 7) {
      if (at >= bytes.length) throw new RangeError('truncated varint');
      const byte = bytes[at++] as number;
      value += (byte & 0x7f) * 2 ** shift; // exact up to 2^53; larger values are clamped anyway
      if ((byte & 0x80) === 0) return value;
    }
    throw new RangeError('varint too long');
  };
  while (at < bytes.length) {
    const tag = varint();
    const field = Math.floor(tag / 8);
    switch (tag % 8) {
      case 0:
        yield [field, varint()];
        break;
      case 1:
        at += 8;
        break;
      case 2: {
        const length = varint();
        if (at + length > bytes.length) throw new RangeError('truncated field');
        yield [field, bytes.subarray(at, at + length)];
        at += length;
        break;
      }
      case 5:
        at += 4;
        break;
      default:
        throw new RangeError(`unsupported wire type ${tag % 8}`);
    }
    if (at > bytes.length) throw new RangeError('truncated field');
  }
}

// A negative int64/int32 travels as a 10-byte two's complement varint.
function signed(varint: number): number {
  return varint >= 2 ** 63 ? varint - 2 ** 64 : varint;
}
