// DedupClient against a real dedupd (env DEDUPD, else <repo>/build/server/dedupd):
// every call, the Begin answer table, and the error/retry behaviour.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { after, before, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { argsHash, backoffCeilingMs, DedupClient, DedupRpcError } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

let server: Dedupd;
let client: DedupClient;
const ns = 'ts-client:test';
const hashA = argsHash({ a: 1 });
const hashB = argsHash({ a: 2 });
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

before(async () => {
  server = await startDedupd({ args: ['--min_lease_ms=100'] });
  client = new DedupClient({ address: server.address });
});
after(async () => {
  client.close();
  await server.stop();
});

function freshKey(): string {
  return `k-${randomUUID()}`;
}

test('Begin STARTED, re-entry, IN_USE, CONFLICT, then Complete and DUPLICATE', async () => {
  const key = freshKey();
  const started = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o1', leaseMs: 10_000 });
  assert.equal(started.status, 'STARTED');
  assert.ok(started.fence > 0n);
  assert.equal(started.attempts, 1);
  assert.ok(started.leaseExpiresAt > Date.now() + 5000);

  const reentered = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o1' });
  assert.deepEqual([reentered.status, reentered.fence], ['STARTED', started.fence]);

  const inUse = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o2' });
  assert.equal(inUse.status, 'IN_USE');
  assert.ok(inUse.retryAfterMs > 0);

  const conflict = await client.begin({ namespace: ns, key, argsHash: hashB, owner: 'o3' });
  assert.equal(conflict.status, 'CONFLICT');

  const done = await client.complete({ namespace: ns, key, fence: started.fence, outcome: 'SUCCESS', result: 'sent' });
  assert.equal(done.status, 'OK');
  // Complete is idempotent.
  const again = await client.complete({ namespace: ns, key, fence: started.fence, outcome: 'SUCCESS', result: 'sent' });
  assert.equal(again.status, 'OK');
  const different = await client.complete({ namespace: ns, key, fence: started.fence, outcome: 'SUCCESS', result: 'other' });
  assert.equal(different.status, 'ALREADY_COMPLETED');

  const dup = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o4' });
  assert.equal(dup.status, 'DUPLICATE');
  assert.equal(dup.outcome, 'SUCCESS');
  assert.equal(dup.result.toString(), 'sent');
  assert.equal(dup.fence, started.fence);
  assert.ok(dup.completedAt >= dup.createdAt);
});

test('Begin with wait_ms returns the outcome as soon as the owner completes', async () => {
  const key = freshKey();
  const first = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o1' });
  const t0 = Date.now();
  const waiting = client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o2', waitMs: 5000 });
  await sleep(200);
  await client.complete({ namespace: ns, key, fence: first.fence, outcome: 'ERROR', result: '{"message":"no"}' });
  const answer = await waiting;
  assert.equal(answer.status, 'DUPLICATE');
  assert.equal(answer.outcome, 'ERROR');
  assert.ok(Date.now() - t0 < 3000, 'the waiting Begin should not sit out its whole wait');
});

test('an expired lease is taken over with a higher fence; the old owner gets STALE_FENCE', async () => {
  const key = freshKey();
  const first = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o1', leaseMs: 100 });
  await sleep(200);
  const second = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o2', leaseMs: 10_000 });
  assert.equal(second.status, 'STARTED');
  assert.equal(second.takeover, true);
  assert.ok(second.fence > first.fence);
  assert.equal(second.attempts, 2);

  const stale = await client.complete({ namespace: ns, key, fence: first.fence, outcome: 'SUCCESS', result: 'late' });
  assert.deepEqual([stale.status, stale.fence], ['STALE_FENCE', second.fence]);
  assert.equal((await client.release({ namespace: ns, key, fence: first.fence })).status, 'STALE_FENCE');
  assert.equal((await client.renew({ namespace: ns, key, fence: first.fence })).status, 'STALE_FENCE');
});

test('Renew extends the lease; Release frees the key for a fresh, higher fence', async () => {
  const key = freshKey();
  const first = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'o1', leaseMs: 1000 });
  const renewed = await client.renew({ namespace: ns, key, fence: first.fence, leaseMs: 30_000 });
  assert.equal(renewed.status, 'OK');
  assert.ok(renewed.leaseExpiresAt > first.leaseExpiresAt + 20_000);
  assert.ok(renewed.expiresAt >= renewed.leaseExpiresAt);

  assert.equal((await client.release({ namespace: ns, key, fence: first.fence })).status, 'OK');
  assert.equal((await client.release({ namespace: ns, key, fence: first.fence })).status, 'NOT_FOUND');
  const next = await client.begin({ namespace: ns, key, argsHash: hashB, owner: 'o2' });
  assert.equal(next.status, 'STARTED');
  assert.ok(next.fence > first.fence);
});

test('Get shows the record; Forget removes it', async () => {
  const key = freshKey();
  assert.deepEqual(await client.get({ namespace: ns, key }), { record: null });
  const started = await client.begin({ namespace: ns, key, argsHash: hashA, owner: 'me' });
  const inFlight = (await client.get({ namespace: ns, key })).record;
  assert.equal(inFlight?.state, 'IN_FLIGHT');
  assert.equal(inFlight?.owner, 'me');
  assert.deepEqual(inFlight?.argsHash, hashA);
  assert.equal(inFlight?.outcome, null);

  await client.complete({ namespace: ns, key, fence: started.fence, outcome: 'SUCCESS', result: Buffer.from([0, 255]) });
  const completed = (await client.get({ namespace: ns, key })).record;
  assert.equal(completed?.state, 'COMPLETED');
  assert.equal(completed?.outcome, 'SUCCESS');
  assert.deepEqual(completed?.result, Buffer.from([0, 255]));

  assert.deepEqual(await client.forget({ namespace: ns, key }), { existed: true });
  assert.deepEqual(await client.forget({ namespace: ns, key }), { existed: false });
  assert.deepEqual(await client.get({ namespace: ns, key }), { record: null });
});

test('bad input is INVALID_ARGUMENT naming the field, and is not retried', async () => {
  const sleeps: number[] = [];
  const strict = new DedupClient({ address: server.address, sleep: async (ms) => void sleeps.push(ms) });
  try {
    await assert.rejects(strict.begin({ namespace: 'has space', key: 'k' }), (error: unknown) => {
      assert.ok(error instanceof DedupRpcError);
      assert.equal(error.code, GrpcStatus.INVALID_ARGUMENT);
      assert.equal(error.codeName, 'INVALID_ARGUMENT');
      assert.equal(error.method, 'Begin');
      assert.match(error.details, /^namespace: /);
      return true;
    });
    await assert.rejects(strict.complete({ namespace: ns, key: 'k', fence: 0n, outcome: 'SUCCESS' }), /fence/);
    assert.deepEqual(sleeps, []);
  } finally {
    strict.close();
  }
});

test('an unreachable server is UNAVAILABLE after maxAttempts, with full-jitter backoff', async () => {
  // A port that was free a moment ago: connections are refused.
  const port = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
  const sleeps: number[] = [];
  const backoff = { baseMs: 10, capMs: 40 };
  const down = new DedupClient({
    address: `127.0.0.1:${port}`, maxAttempts: 4, backoff, random: () => 0.999, deadlineMs: 2000,
    sleep: async (ms) => void sleeps.push(ms),
  });
  try {
    await assert.rejects(down.get({ namespace: ns, key: 'k' }), (error: unknown) => {
      assert.ok(error instanceof DedupRpcError);
      assert.equal(error.codeName, 'UNAVAILABLE');
      return true;
    });
    assert.equal(sleeps.length, 3);
    sleeps.forEach((ms, n) => assert.ok(ms < backoffCeilingMs(backoff, n) && ms > 0.99 * backoffCeilingMs(backoff, n)));
  } finally {
    down.close();
  }
});
