// withIdempotency against a real dedupd: once-only execution, replay of
// results and errors, release on retryable failures, waiting on a busy key,
// and the lost-lease case.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';

import { ConflictError, DedupClient, ReplayedError, RetryableError, StaleFenceError } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

let server: Dedupd;
let client: DedupClient;
const ns = 'ts-client:with-idempotency';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

before(async () => {
  server = await startDedupd({ args: ['--min_lease_ms=100'] });
  client = new DedupClient({ address: server.address });
});
after(async () => {
  client.close();
  await server.stop();
});

test('runs once; the retry gets the stored result with duplicate: true', async () => {
  const key = randomUUID();
  let runs = 0;
  const fn = (): { invoiceId: string } => ({ invoiceId: `inv-${++runs}` });
  const first = await client.withIdempotency({ namespace: ns, key, args: { amount: 10 } }, fn);
  const second = await client.withIdempotency({ namespace: ns, key, args: { amount: 10 } }, fn);
  assert.deepEqual([first.result, first.duplicate], [{ invoiceId: 'inv-1' }, false]);
  assert.deepEqual([second.result, second.duplicate, second.outcome], [{ invoiceId: 'inv-1' }, true, 'SUCCESS']);
  assert.equal(runs, 1);
});

test('without a key, equal args (in any member order) dedupe', async () => {
  const args = { customer: randomUUID(), amount: 3, currency: 'EUR' };
  let runs = 0;
  await client.withIdempotency({ namespace: ns, args }, () => ++runs);
  const again = await client.withIdempotency({ namespace: ns, args: { currency: 'EUR', amount: 3, customer: args.customer } }, () => ++runs);
  assert.deepEqual([again.result, again.duplicate, runs], [1, true, 1]);
});

test('same key, other args: ConflictError and fn does not run', async () => {
  const key = randomUUID();
  await client.withIdempotency({ namespace: ns, key, args: { amount: 1 } }, () => 'ok');
  await assert.rejects(
    client.withIdempotency({ namespace: ns, key, args: { amount: 2 } }, () => assert.fail('must not run')),
    ConflictError,
  );
});

test('a permanent failure is stored and replayed as ReplayedError without re-running', async () => {
  const key = randomUUID();
  const failure = Object.assign(new Error('invalid amount'), { name: 'InvoiceError', code: 'INVALID_AMOUNT' });
  let runs = 0;
  const fn = (): never => {
    runs++;
    throw failure;
  };
  await assert.rejects(client.withIdempotency({ namespace: ns, key, args: {} }, fn), (e: unknown) => e === failure);
  await assert.rejects(client.withIdempotency({ namespace: ns, key, args: {} }, fn), (e: unknown) => {
    assert.ok(e instanceof ReplayedError);
    assert.deepEqual(e.stored, { name: 'InvoiceError', message: 'invalid amount', code: 'INVALID_AMOUNT' });
    return true;
  });
  assert.equal(runs, 1);
});

test('a retryable failure releases the claim: the next call runs afresh', async () => {
  const key = randomUUID();
  await assert.rejects(
    client.withIdempotency({ namespace: ns, key, args: {} }, () => { throw new RetryableError('smtp 503'); }),
    RetryableError,
  );
  assert.deepEqual(await client.get({ namespace: ns, key }), { record: null });
  const retry = await client.withIdempotency({ namespace: ns, key, args: {} }, () => 'sent');
  assert.deepEqual([retry.result, retry.duplicate], ['sent', false]);
});

test('concurrent calls with one key run fn once; the others wait and share its result', async () => {
  const key = randomUUID();
  let runs = 0;
  const fn = async (): Promise<string> => {
    runs++;
    await sleep(300);
    return 'the one result';
  };
  const results = await Promise.all(
    Array.from({ length: 5 }, () => client.withIdempotency({ namespace: ns, key, args: { x: 1 } }, fn)),
  );
  assert.equal(runs, 1);
  assert.deepEqual(results.map((r) => r.result), Array(5).fill('the one result'));
  assert.equal(results.filter((r) => !r.duplicate).length, 1);
});

test('a caller that outlives its lease (not renewed) gets StaleFenceError from Complete; the taker-over\'s result stands', async () => {
  const key = randomUUID();
  // autoRenew off: a lease that lapses mid-call (renewal.integration.test.ts
  // covers the renewed case, and a claim lost while renewing).
  const slow = client.withIdempotency({ namespace: ns, key, args: {}, leaseMs: 100, autoRenew: false }, async () => {
    await sleep(600);
    return 'slow';
  });
  await sleep(50);
  // Waits out the 100 ms lease, then takes over.
  const fast = await client.withIdempotency({ namespace: ns, key, args: {}, leaseMs: 5000 }, (claim) => {
    assert.equal(claim.takeover, true);
    return 'fast';
  });
  assert.deepEqual([fast.result, fast.duplicate, fast.takeover], ['fast', false, true]);
  await assert.rejects(slow, (error: unknown) => error instanceof StaleFenceError && error.call === 'Complete');
  const replay = await client.withIdempotency({ namespace: ns, key, args: {} }, () => 'never');
  assert.deepEqual([replay.result, replay.duplicate], ['fast', true]);
});
