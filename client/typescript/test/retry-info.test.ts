// The server's RetryInfo: RESOURCE_EXHAUSTED carrying one (a tenant over its
// limits) is retried after exactly its delay (capped at 30 s), as an
// attempt, for unary calls, batches (whole) and coalesced calls; without one
// RESOURCE_EXHAUSTED keeps its old handling. The trailer is encoded here by
// protobufjs from proto/dedup/v1/error_details.proto (an encoder independent
// of the client's hand decoder); tenant-limits.integration.test.ts does the
// same against a real dedupd.
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';

import { Metadata, status as GrpcStatus } from '@grpc/grpc-js';
import protobuf from 'protobufjs';

import { DedupClient, type DedupClientOptions, DedupRpcError } from '../src/index.js';
import { retryDelayFromStatusDetails, serverRetryDelayMs } from '../src/retry-info.js';
import { FakeDedupd, type Reply, type Script, started } from './fake-dedupd.js';

const REFUSAL = 'tenant "slow" is over its limit of 5 requests per second; retry in 250 ms';
// keepCase: the proto's field names (retry_delay, type_url), as the server's.
const root = new protobuf.Root().loadSync(
  fileURLToPath(new URL('../../../../proto/dedup/v1/error_details.proto', import.meta.url)),
  { keepCase: true },
);
const RpcStatus = root.lookupType('dedup.v1.RpcStatus');
const RetryInfo = root.lookupType('dedup.v1.RetryInfo');

/** A serialized google.rpc.Status as dedupd sends it, with a RetryInfo of `delayMs` (none if undefined). */
function statusDetails(delayMs: number | undefined, extraFirst = false): Buffer {
  const details: { type_url: string; value: Uint8Array }[] = [];
  if (extraFirst) details.push({ type_url: 'type.googleapis.com/google.rpc.DebugInfo', value: Buffer.from([0x0a, 0x01, 0x78]) });
  if (delayMs !== undefined) {
    const seconds = Math.floor(delayMs / 1000);
    const retry = RetryInfo.create({ retry_delay: { seconds, nanos: Math.round((delayMs - seconds * 1000) * 1e6) } });
    details.push({ type_url: 'type.googleapis.com/google.rpc.RetryInfo', value: RetryInfo.encode(retry).finish() });
  }
  const status = RpcStatus.create({ code: GrpcStatus.RESOURCE_EXHAUSTED, message: REFUSAL, details });
  return Buffer.from(RpcStatus.encode(status).finish());
}

function overLimit(delayMs: number | undefined): Reply {
  return {
    error: {
      code: GrpcStatus.RESOURCE_EXHAUSTED,
      details: REFUSAL,
      trailers: { 'grpc-status-details-bin': statusDetails(delayMs) },
    },
  };
}

const fakes: FakeDedupd[] = [];
const clients: DedupClient[] = [];
after(() => {
  for (const c of clients) c.close();
  for (const f of fakes) f.stop();
});

async function fake(script: Script): Promise<FakeDedupd> {
  const f = await FakeDedupd.start(script);
  fakes.push(f);
  return f;
}

/** A client whose sleeps are recorded instead of slept. */
function client(options: DedupClientOptions): { client: DedupClient; sleeps: number[] } {
  const sleeps: number[] = [];
  const c = new DedupClient({ sleep: async (ms) => void sleeps.push(ms), random: () => 0.5, ...options });
  clients.push(c);
  return { client: c, sleeps };
}

/** Refuses the first `refusals` calls of every method with `overLimit(delayMs)`, then answers. */
function refusing(refusals: number, delayMs: number | undefined): Script {
  return (method, request, nth) => {
    if (nth < refusals) return overLimit(delayMs);
    if (method === 'Begin') return { response: started(nth + 1) };
    const items = (request as { items: unknown[] }).items;
    return { response: { items: items.map((_, i) => ({ response: started(i + 1) })) } };
  };
}

test('the trailer is read among other details, capped at 30 s, and ignored when malformed', () => {
  assert.equal(retryDelayFromStatusDetails(statusDetails(180)), 180);
  assert.equal(retryDelayFromStatusDetails(statusDetails(1500, true)), 1500);
  assert.equal(retryDelayFromStatusDetails(statusDetails(undefined)), undefined);
  assert.equal(retryDelayFromStatusDetails(Buffer.from([0x1a, 0x05, 0x0a])), undefined);
  const md = (bytes: Buffer): Metadata => {
    const m = new Metadata();
    m.set('grpc-status-details-bin', bytes);
    return m;
  };
  assert.equal(serverRetryDelayMs(GrpcStatus.RESOURCE_EXHAUSTED, md(statusDetails(3_600_000))), 30_000);
  assert.equal(serverRetryDelayMs(GrpcStatus.UNAVAILABLE, md(statusDetails(100))), undefined);
  assert.equal(serverRetryDelayMs(GrpcStatus.RESOURCE_EXHAUSTED, new Metadata()), undefined);
});

test('a unary call waits exactly the server delay and goes again with the same request', async () => {
  const server = await fake(refusing(1, 250));
  const { client: c, sleeps } = client({ address: server.address, maxAttempts: 2 });
  const answer = await c.begin({ namespace: 'slow:x', key: 'k', argsHash: Buffer.alloc(1), owner: 'o' });
  assert.equal(answer.status, 'STARTED');
  assert.deepEqual(sleeps, [250], 'the server delay, with no jitter or backoff');
  assert.deepEqual(server.callsOf('Begin').map((c) => c.request.owner), ['o', 'o']);
});

test('the server delay is capped at 30 s', async () => {
  const server = await fake(refusing(1, 3_600_000));
  const { client: c, sleeps } = client({ address: server.address });
  await c.begin({ namespace: 'slow:x', key: 'k', owner: 'o' });
  assert.deepEqual(sleeps, [30_000]);
});

test('it counts as an attempt: out of attempts, the refusal reaches the caller', async () => {
  const server = await fake(refusing(3, 100));
  const { client: c, sleeps } = client({ address: server.address, maxAttempts: 3 });
  await assert.rejects(c.begin({ namespace: 'slow:x', key: 'k', owner: 'o' }), (error: unknown) => {
    assert.ok(error instanceof DedupRpcError);
    assert.equal(error.code, GrpcStatus.RESOURCE_EXHAUSTED);
    assert.match(error.details, /requests per second/);
    assert.equal(error.retryDelayMs, 100);
    return true;
  });
  assert.equal(server.callsOf('Begin').length, 3);
  assert.deepEqual(sleeps, [100, 100], 'no wait after the last attempt');
});

test('RESOURCE_EXHAUSTED without a RetryInfo is not retried', async () => {
  const server = await fake(refusing(1, undefined));
  const { client: c, sleeps } = client({ address: server.address });
  await assert.rejects(c.begin({ namespace: 'slow:x', key: 'k', owner: 'o' }), (error: unknown) => {
    assert.ok(error instanceof DedupRpcError);
    assert.equal(error.code, GrpcStatus.RESOURCE_EXHAUSTED);
    assert.equal(error.retryDelayMs, undefined);
    return true;
  });
  assert.equal(server.callsOf('Begin').length, 1);
  assert.deepEqual(sleeps, []);
});

test('a refused batch is sent again whole after the delay', async () => {
  const server = await fake(refusing(1, 200));
  const { client: c, sleeps } = client({ address: server.address, maxAttempts: 2 });
  const results = await c.beginBatch(['k1', 'k2', 'k3'].map((key) => ({ namespace: 'slow:x', key, owner: 'o' })));
  assert.deepEqual(results.map((r) => r.ok), [true, true, true]);
  assert.deepEqual(server.callsOf('BeginBatch').map((c) => (c.request.items as unknown[]).length), [3, 3]);
  assert.deepEqual(sleeps, [200]);
});

test('coalesced calls: the batch waits the delay and goes again whole; out of attempts it is not split', async () => {
  const server = await fake(refusing(1, 300));
  const { client: c, sleeps } = client({ address: server.address, maxAttempts: 2, coalesce: true });
  const answers = await Promise.all(['a', 'b'].map((key) => c.begin({ namespace: 'slow:x', key, owner: key })));
  assert.deepEqual(answers.map((a) => a.status), ['STARTED', 'STARTED']);
  assert.deepEqual(server.callsOf('BeginBatch').map((c) => (c.request.items as unknown[]).length), [2, 2]);
  assert.deepEqual(sleeps, [300]);

  const always = await fake(refusing(Infinity, 10));
  const { client: once } = client({ address: always.address, maxAttempts: 1, coalesce: true });
  const refused = await Promise.allSettled(['a', 'b'].map((key) => once.begin({ namespace: 'slow:x', key, owner: key })));
  for (const r of refused) {
    assert.equal(r.status, 'rejected');
    assert.ok(r.reason instanceof DedupRpcError);
    assert.equal(r.reason.code, GrpcStatus.RESOURCE_EXHAUSTED);
    assert.equal(r.reason.method, 'Begin');
    assert.match(r.reason.details, /requests per second/);
  }
  // "Later", not "too large": no item-by-item resend.
  assert.deepEqual(always.callsOf('BeginBatch').map((c) => (c.request.items as unknown[]).length), [2]);
});
