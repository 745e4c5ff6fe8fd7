// Backoff arithmetic and the retry loop, with the random source and sleep pinned.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { backoffCeilingMs, DedupRpcError, fullJitterDelayMs, retryUnavailable } from '../src/index.js';

const options = { baseMs: 50, capMs: 1000 };

test('ceiling doubles from base up to the cap', () => {
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6].map((n) => backoffCeilingMs(options, n)), [50, 100, 200, 400, 800, 1000, 1000]);
  assert.equal(backoffCeilingMs(options, -3), 50);
  assert.equal(backoffCeilingMs(options, 5000), 1000); // 2^5000 is Infinity: still the cap
});

test('full jitter scales the ceiling by the random draw', () => {
  assert.equal(fullJitterDelayMs(options, 2, () => 0), 0);
  assert.equal(fullJitterDelayMs(options, 2, () => 0.5), 100);
  assert.equal(fullJitterDelayMs(options, 10, () => 0.25), 250);
});

function unavailable(): DedupRpcError {
  return new DedupRpcError('Begin', GrpcStatus.UNAVAILABLE, 'UNAVAILABLE', 'connection refused');
}

function policy(sleeps: number[], maxAttempts = 4) {
  return { maxAttempts, backoff: options, random: () => 0.5, sleep: async (ms: number) => void sleeps.push(ms) };
}

test('retries UNAVAILABLE with jittered, growing delays until it succeeds', async () => {
  const sleeps: number[] = [];
  const result = await retryUnavailable(policy(sleeps), async (n) => {
    if (n < 3) throw unavailable();
    return `ok after ${n}`;
  });
  assert.equal(result, 'ok after 3');
  assert.deepEqual(sleeps, [25, 50, 100]);
});

test('gives up after maxAttempts with the last UNAVAILABLE', async () => {
  const sleeps: number[] = [];
  let calls = 0;
  await assert.rejects(
    retryUnavailable(policy(sleeps, 3), async () => {
      calls++;
      throw unavailable();
    }),
    (error: unknown) => error instanceof DedupRpcError && error.code === GrpcStatus.UNAVAILABLE,
  );
  assert.equal(calls, 3);
  assert.equal(sleeps.length, 2);
});

for (const code of [GrpcStatus.INVALID_ARGUMENT, GrpcStatus.RESOURCE_EXHAUSTED, GrpcStatus.DEADLINE_EXCEEDED, GrpcStatus.ABORTED]) {
  test(`does not retry ${GrpcStatus[code]}`, async () => {
    const sleeps: number[] = [];
    let calls = 0;
    await assert.rejects(
      retryUnavailable(policy(sleeps), async () => {
        calls++;
        throw new DedupRpcError('Begin', code, GrpcStatus[code] ?? '', 'no');
      }),
      DedupRpcError,
    );
    assert.equal(calls, 1);
    assert.deepEqual(sleeps, []);
  });
}

test('does not retry non-gRPC errors', async () => {
  let calls = 0;
  await assert.rejects(
    retryUnavailable(policy([]), async () => {
      calls++;
      throw new TypeError('bug');
    }),
    TypeError,
  );
  assert.equal(calls, 1);
});
