// withIdempotency renews its lease against a real dedupd: a side effect far
// longer than its lease keeps the key (other callers see IN_USE, never a
// takeover), and a claim lost while it runs aborts the function's signal.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  argsHash,
  type BeginStatus,
  DedupClient,
  type IdempotencyCalls,
  OutcomeNotRecordedError,
  type RenewRequest,
  type RenewResponse,
  StaleFenceError,
  withIdempotency,
} from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

let server: Dedupd;
let client: DedupClient;
const ns = 'ts-client:renewal';
const LEASE_MS = 600;

before(async () => {
  server = await startDedupd({ args: ['--min_lease_ms=100'] });
  client = new DedupClient({ address: server.address });
});
after(async () => {
  client.close();
  await server.stop();
});

/** The client's calls, with every Renew answer recorded and Renews held while `hold` is set. */
function observedCalls(): IdempotencyCalls & { renewAnswers: RenewResponse[]; hold: Promise<void> | undefined } {
  const calls = {
    renewAnswers: [] as RenewResponse[],
    hold: undefined as Promise<void> | undefined,
    begin: client.begin.bind(client),
    complete: client.complete.bind(client),
    release: client.release.bind(client),
    async renew(request: RenewRequest): Promise<RenewResponse> {
      await calls.hold;
      const answer = await client.renew(request);
      calls.renewAnswers.push(answer);
      return answer;
    },
  };
  return calls;
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

test('a side effect running 3x its lease keeps the key: a concurrent caller sees IN_USE, never a takeover', { timeout: 20_000 }, async () => {
  const key = randomUUID();
  const calls = observedCalls();
  let holding!: () => void;
  const claimed = new Promise<void>((resolve) => (holding = resolve));
  let ranMs = 0;
  const holder = withIdempotency(calls, { namespace: ns, key, args: {}, leaseMs: LEASE_MS }, async (claim) => {
    const startedAt = performance.now();
    holding();
    await sleep(3 * LEASE_MS);
    ranMs = performance.now() - startedAt;
    assert.equal(claim.signal.aborted, false);
    return 'sent once';
  });
  await claimed;

  // Another caller retries the key with its own owner until it is settled;
  // the server holds each Begin up to 200 ms (or until the lease runs out).
  const answers: Array<{ status: BeginStatus; takeover: boolean }> = [];
  for (;;) {
    const answer = await client.begin({ namespace: ns, key, argsHash: argsHash({}), owner: randomUUID(), leaseMs: LEASE_MS, waitMs: 200 });
    answers.push({ status: answer.status, takeover: answer.takeover });
    if (answer.status !== 'IN_USE') break;
  }
  // And one through withIdempotency, whose function must never run.
  const retry = await client.withIdempotency({ namespace: ns, key, args: {}, leaseMs: LEASE_MS }, () => assert.fail('ran twice'));

  const done = await holder;
  assert.ok(ranMs >= 3 * LEASE_MS - 1, `the side effect ran ${ranMs} ms`);
  assert.deepEqual([done.result, done.duplicate, done.takeover], ['sent once', false, false]);
  assert.ok(answers.length >= 4, `${answers.length} Begins while it ran`);
  assert.deepEqual(answers.slice(0, -1), Array(answers.length - 1).fill({ status: 'IN_USE', takeover: false }));
  assert.equal(answers.at(-1)?.status, 'DUPLICATE');
  assert.deepEqual([retry.result, retry.duplicate], ['sent once', true]);
  // At least one renewal per lease it outlived, every one accepted.
  assert.ok(calls.renewAnswers.length >= 3, `${calls.renewAnswers.length} renewals`);
  assert.deepEqual(new Set(calls.renewAnswers.map((a) => a.status)), new Set(['OK']));
  const record = (await client.get({ namespace: ns, key })).record;
  assert.deepEqual([record?.state, record?.attempts, record?.fence], ['COMPLETED', 1, done.fence]);
});

test('renewals held up (a frozen process) while another caller takes over: the next one is refused, the signal aborts', { timeout: 20_000 }, async () => {
  const key = randomUUID();
  const calls = observedCalls();
  let release!: () => void;
  calls.hold = new Promise<void>((resolve) => (release = resolve));
  let claimed!: (fence: bigint) => void;
  const claimedFence = new Promise<bigint>((resolve) => (claimed = resolve));
  let sawAbort = false;
  const holder = withIdempotency(calls, { namespace: ns, key, args: {}, leaseMs: 200 }, async (claim) => {
    claimed(claim.fence);
    await aborted(claim.signal);
    sawAbort = true;
    return 'late';
  });
  const fence = await claimedFence;

  // No renewal reaches the server: the lease lapses and this caller takes over.
  const taker = await client.withIdempotency({ namespace: ns, key, args: {}, leaseMs: 5000 }, () => 'taken over');
  assert.deepEqual([taker.result, taker.takeover, taker.fence], ['taken over', true, fence + 1n]);
  release();

  await assert.rejects(holder, (error: unknown) => {
    assert.ok(error instanceof StaleFenceError);
    assert.deepEqual([error.call, error.fence, error.currentFence], ['Renew', fence, fence + 1n]);
    return true;
  });
  assert.equal(sawAbort, true);
  assert.equal(calls.renewAnswers[0]?.status, 'STALE_FENCE');
  const replay = await client.withIdempotency({ namespace: ns, key, args: {} }, () => assert.fail('must not run'));
  assert.deepEqual([replay.result, replay.duplicate], ['taken over', true]);
});

test('a record forgotten while its function runs: the next renewal gets NOT_FOUND and aborts the signal', { timeout: 20_000 }, async () => {
  const key = randomUUID();
  let claimed!: () => void;
  const isClaimed = new Promise<void>((resolve) => (claimed = resolve));
  const holder = client.withIdempotency({ namespace: ns, key, args: {}, leaseMs: 300 }, async (claim) => {
    claimed();
    await aborted(claim.signal);
    claim.signal.throwIfAborted();
  });
  await isClaimed;
  assert.equal((await client.forget({ namespace: ns, key })).existed, true);
  await assert.rejects(holder, (error: unknown) => {
    assert.ok(error instanceof OutcomeNotRecordedError && !(error instanceof StaleFenceError));
    assert.deepEqual([error.call, error.answer], ['Renew', 'NOT_FOUND']);
    return true;
  });
  // Nothing was completed behind the caller's back.
  assert.deepEqual(await client.get({ namespace: ns, key }), { record: null });
});

test('client.withIdempotency renews by itself (no fake in between)', { timeout: 20_000 }, async () => {
  const key = randomUUID();
  const out = await client.withIdempotency({ namespace: ns, key, args: {}, leaseMs: 150 }, async (claim) => {
    await sleep(500);
    const record = (await client.get({ namespace: ns, key })).record;
    // Begin granted until claim.leaseExpiresAt; renewals pushed it on.
    assert.ok((record?.leaseExpiresAt ?? 0) > claim.leaseExpiresAt + 200, 'lease renewed');
    return claim.signal.aborted;
  });
  assert.deepEqual([out.result, out.takeover], [false, false]);
});
