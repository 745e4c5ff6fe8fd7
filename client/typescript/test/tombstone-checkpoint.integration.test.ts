// EXPIRED (a completed record's tombstone), acceptRerun and checkpoints
// against a real dedupd: a late retry is refused with ExpiredError unless it
// accepts a re-run; a takeover resumes from the last checkpoint; a
// checkpoint refused as STALE_FENCE loses the claim (signal aborted).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  argsHash,
  type ClaimCheckpoint,
  DedupClient,
  ExpiredError,
  ReplayedError,
  StaleFenceError,
} from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

let server: Dedupd;
let client: DedupClient;
const ns = 'ts-client:tombstone-checkpoint';

before(async () => {
  server = await startDedupd({ args: ['--min_lease_ms=100'] });
  client = new DedupClient({ address: server.address });
});
after(async () => {
  client.close();
  await server.stop();
});

/** Polls Get until the record is gone (expired), for at most `timeoutMs`. */
async function untilExpired(key: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await client.get({ namespace: ns, key })).record !== null) {
    if (Date.now() > deadline) assert.fail(`record ${key} did not expire within ${timeoutMs} ms`);
    await sleep(50);
  }
}

test('an expired completion is ExpiredError (not a duplicate, not a re-run); acceptRerun runs it again with a higher fence', { timeout: 20_000 }, async () => {
  const key = randomUUID();
  const args = { invoice: 7 };
  let runs = 0;
  const fn = (): string => `sent-${++runs}`;
  const first = await client.withIdempotency({ namespace: ns, key, args, ttlS: 1 }, fn);
  assert.deepEqual([first.result, first.duplicate, first.rerun], ['sent-1', false, false]);
  await untilExpired(key);

  await assert.rejects(client.withIdempotency({ namespace: ns, key, args }, fn), (error: unknown) => {
    assert.ok(!(error instanceof ReplayedError));
    assert.ok(error instanceof ExpiredError);
    assert.deepEqual([error.key, error.fence, error.outcome, error.attempts], [key, first.fence, 'SUCCESS', 1]);
    assert.ok(error.completedAt > 0 && error.completedAt <= Date.now(), `completedAt ${error.completedAt}`);
    assert.ok(error.tombstoneExpiresAt > Date.now() + 3_600_000, 'kept 7 days by default');
    assert.match(error.message, /already ran .*no longer kept/);
    return true;
  });
  assert.equal(runs, 1);

  // Other args on the tombstone: CONFLICT, as on a live record.
  await assert.rejects(client.withIdempotency({ namespace: ns, key, args: { invoice: 8 }, acceptRerun: true }, fn), /conflict/);

  const again = await client.withIdempotency({ namespace: ns, key, args, acceptRerun: true }, (claim) => {
    assert.deepEqual([claim.rerun, claim.takeover, claim.lastCheckpoint], [true, false, null]);
    return fn();
  });
  assert.deepEqual([again.result, again.duplicate, again.rerun, runs], ['sent-2', false, true, 2]);
  assert.ok(again.fence > first.fence, `${again.fence} > ${first.fence}`);
  const replay = await client.withIdempotency({ namespace: ns, key, args, acceptRerun: true }, fn);
  assert.deepEqual([replay.result, replay.duplicate, replay.rerun, runs], ['sent-2', true, false, 2]);
});

test('raw begin answers EXPIRED with the tombstone, and STARTED with rerun under acceptRerun', { timeout: 20_000 }, async () => {
  const key = randomUUID();
  const hash = argsHash({});
  const started = await client.begin({ namespace: ns, key, argsHash: hash, owner: 'a', ttlS: 1 });
  const done = await client.complete({ namespace: ns, key, fence: started.fence, outcome: 'ERROR', result: 'declined' });
  assert.equal(done.status, 'OK');
  await untilExpired(key);
  const late = await client.begin({ namespace: ns, key, argsHash: hash, owner: 'b' });
  assert.deepEqual([late.status, late.fence, late.outcome, late.result.length], ['EXPIRED', started.fence, 'ERROR', 0]);
  assert.ok(late.completedAt >= late.createdAt && late.tombstoneExpiresAt > late.completedAt);
  const rerun = await client.begin({ namespace: ns, key, argsHash: hash, owner: 'c', acceptRerun: true });
  assert.deepEqual([rerun.status, rerun.rerun, rerun.attempts], ['STARTED', true, 2]);
  assert.ok(rerun.fence > started.fence);
});

test('a takeover gets the last checkpoint; the old owner\'s next checkpoint is STALE_FENCE and aborts its signal', { timeout: 20_000 }, async () => {
  const key = randomUUID();
  const args = { order: 42 };
  let checkpointed!: (fence: bigint) => void;
  const firstCheckpointed = new Promise<bigint>((resolve) => (checkpointed = resolve));
  let resume!: () => void;
  const takenOver = new Promise<void>((resolve) => (resume = resolve));
  let firstSignal: AbortSignal | undefined;

  // autoRenew off and a short lease: the first owner stops renewing (a frozen
  // process), so only its checkpoint can find out it lost the claim.
  const first = client.withIdempotency({ namespace: ns, key, args, leaseMs: 300, autoRenew: false }, async (claim) => {
    firstSignal = claim.signal;
    await claim.checkpoint('charged', { charge: 'ch_1', amount: 12.5 });
    checkpointed(claim.fence);
    await takenOver;
    await claim.checkpoint('shipped', { parcel: 1 });
    return 'must not complete';
  });
  const firstFence = await firstCheckpointed;

  let seen: ClaimCheckpoint | null = null;
  const second = await client.withIdempotency({ namespace: ns, key, args, leaseMs: 5000 }, (claim) => {
    seen = claim.lastCheckpoint;
    assert.equal(claim.takeover, true);
    return `resumed after ${String((claim.lastCheckpoint?.data as { charge?: string } | undefined)?.charge)}`;
  });
  assert.deepEqual([second.result, second.takeover], ['resumed after ch_1', true]);
  assert.ok(second.fence > firstFence);
  const checkpoint = seen as ClaimCheckpoint | null;
  assert.deepEqual(
    [checkpoint?.step, checkpoint?.data, checkpoint?.fence, checkpoint?.raw.toString()],
    ['charged', { charge: 'ch_1', amount: 12.5 }, firstFence, '{"charge":"ch_1","amount":12.5}'],
  );
  assert.ok((checkpoint?.recordedAt ?? 0) > 0);

  resume();
  await assert.rejects(first, (error: unknown) => {
    assert.ok(error instanceof StaleFenceError);
    assert.deepEqual([error.call, error.fence, error.currentFence], ['Checkpoint', firstFence, second.fence]);
    return true;
  });
  assert.equal(firstSignal?.aborted, true);
  assert.ok(firstSignal?.reason instanceof StaleFenceError);
  const replay = await client.withIdempotency({ namespace: ns, key, args }, () => assert.fail('must not run'));
  assert.deepEqual([replay.result, replay.duplicate], ['resumed after ch_1', true]);
});

test('raw checkpoint: OK renews the lease, Get and a re-entering Begin show it; NOT_FOUND, ALREADY_COMPLETED; also through coalesce', { timeout: 20_000 }, async () => {
  const coalescing = new DedupClient({ address: server.address, coalesce: true });
  try {
    const key = randomUUID();
    const begin = await coalescing.begin({ namespace: ns, key, owner: 'w1', leaseMs: 200 });
    assert.equal(begin.checkpoint, null);
    const ok = await coalescing.checkpoint({ namespace: ns, key, fence: begin.fence, step: 'reserved', data: Buffer.from([0, 1, 2]), leaseMs: 5000 });
    assert.equal(ok.status, 'OK');
    assert.ok(ok.leaseExpiresAt >= begin.leaseExpiresAt + 4000, 'the lease was renewed');
    const record = (await client.get({ namespace: ns, key })).record;
    assert.deepEqual([record?.checkpoint?.step, record?.checkpoint?.data, record?.checkpoint?.fence], ['reserved', Buffer.from([0, 1, 2]), begin.fence]);
    const reentry = await client.begin({ namespace: ns, key, owner: 'w1' });
    assert.deepEqual([reentry.status, reentry.fence, reentry.checkpoint?.step], ['STARTED', begin.fence, 'reserved']);

    assert.equal((await client.complete({ namespace: ns, key, fence: begin.fence, outcome: 'SUCCESS' })).status, 'OK');
    assert.equal((await client.checkpoint({ namespace: ns, key, fence: begin.fence, step: 'late' })).status, 'ALREADY_COMPLETED');
    assert.equal((await client.get({ namespace: ns, key })).record?.checkpoint, null);
    assert.equal((await client.checkpoint({ namespace: ns, key: randomUUID(), fence: 3n, step: 's' })).status, 'NOT_FOUND');
    await assert.rejects(client.checkpoint({ namespace: ns, key, fence: begin.fence, step: '' }), /step/);
  } finally {
    coalescing.close();
  }
});
