// withIdempotency's background renewal, against a scripted fake of the calls
// (renewal.integration.test.ts runs the same against a real dedupd): the
// cadence, when it stops, and what a refused renewal does.
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  type BeginRequest,
  type BeginResponse,
  type CompleteRequest,
  type CompleteResponse,
  DedupRpcError,
  type FencedStatus,
  type IdempotencyCalls,
  OutcomeNotRecordedError,
  type ReleaseRequest,
  type ReleaseResponse,
  type RenewRequest,
  type RenewResponse,
  RetryableError,
  StaleFenceError,
  withIdempotency,
} from '../src/index.js';

type RenewScript = FencedStatus | 'UNAVAILABLE';

/** One STARTED claim (fence 7); Renew answers as scripted (then OK), each recorded with its time. */
class RenewingCalls implements IdempotencyCalls {
  readonly renews: Array<{ request: RenewRequest; at: number }> = [];
  readonly completes: CompleteRequest[] = [];
  readonly releases: ReleaseRequest[] = [];
  private waiters: Array<{ count: number; resolve: () => void }> = [];
  constructor(
    private readonly begun: Partial<BeginResponse> = {},
    private readonly script: RenewScript[] = [],
  ) {}
  async begin(_request: BeginRequest): Promise<BeginResponse> {
    return {
      status: 'STARTED', fence: 7n, takeover: false, outcome: null, result: Buffer.alloc(0), createdAt: 1000,
      completedAt: 0, expiresAt: 0, leaseExpiresAt: 61_000, attempts: 1, retryAfterMs: 0, checkpoint: null,
      rerun: false, tombstoneExpiresAt: 0, ...this.begun,
    };
  }
  async complete(request: CompleteRequest): Promise<CompleteResponse> {
    this.completes.push(request);
    return { status: 'OK', fence: request.fence, expiresAt: 0 };
  }
  async release(request: ReleaseRequest): Promise<ReleaseResponse> {
    this.releases.push(request);
    return { status: 'OK', fence: request.fence };
  }
  async renew(request: RenewRequest): Promise<RenewResponse> {
    this.renews.push({ request, at: performance.now() });
    for (const w of this.waiters.filter((w) => this.renews.length >= w.count)) w.resolve();
    const next = this.script.shift() ?? 'OK';
    if (next === 'UNAVAILABLE') throw new DedupRpcError('Renew', 14, 'UNAVAILABLE', 'connection refused');
    return { status: next, fence: next === 'STALE_FENCE' ? 8n : request.fence, leaseExpiresAt: 0, expiresAt: 0 };
  }
  /** Resolves once `count` renewals were sent: the condition, polled by the fake itself. */
  renewed(count: number): Promise<void> {
    if (this.renews.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ count, resolve }));
  }
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

const base = { namespace: 'billing:send_invoice', key: 'k', args: { amount: 5 } };

test('renews every leaseMs/3 with the claim\'s fence and lease while fn runs, then stops', { timeout: 10_000 }, async () => {
  const calls = new RenewingCalls();
  const startedAt = performance.now();
  const out = await withIdempotency(calls, { ...base, leaseMs: 150 }, async (claim) => {
    await calls.renewed(3);
    assert.equal(claim.signal.aborted, false);
    return 'sent';
  });
  assert.deepEqual([out.result, out.duplicate], ['sent', false]);
  assert.equal(calls.completes.length, 1);
  const times = [startedAt, ...calls.renews.map((r) => r.at)];
  // Late is fine; early only by the libuv loop's cached time, which lags the
  // clock by however long the loop was busy (a few ms on a loaded machine).
  // 40 ms still tells a 50 ms cadence from a doubled one (25 ms).
  for (let i = 1; i < times.length; i++) assert.ok(times[i]! - times[i - 1]! >= 40, `renewal ${i} after ${times[i]! - times[i - 1]!} ms`);
  assert.ok(times[3]! - times[0]! >= 140, `three renewals within ${times[3]! - times[0]!} ms`);
  // And not a whole lease apart (the lease would lapse between two): 50 ms
  // each, with room for a busy machine.
  const meanGap = (times[3]! - times[0]!) / 3;
  assert.ok(meanGap < 110, `renewals ${meanGap} ms apart on average`);
  assert.deepEqual(calls.renews[0]?.request, { namespace: base.namespace, key: 'k', fence: 7n, leaseMs: 150 });
  const sent = calls.renews.length;
  await sleep(200); // Four intervals: a renewal still scheduled would have gone.
  assert.equal(calls.renews.length, sent, 'no renewal after completion');
});

test('without leaseMs a first claim renews at a third of the lease the server granted, asking for its default', { timeout: 10_000 }, async () => {
  // Granted 90 ms (server clock: createdAt 1000, lease until 1090): every 30 ms.
  const calls = new RenewingCalls({ createdAt: 1000, leaseExpiresAt: 1090 });
  const startedAt = performance.now();
  await withIdempotency(calls, base, () => calls.renewed(2));
  // Two renewals 30 ms apart. Not >= 60: libuv starts a timer from the loop's
  // cached time, which lags the clock by however long the loop has been busy,
  // so a loaded machine sees timers fire a few ms early by performance.now().
  assert.ok(performance.now() - startedAt >= 50);
  assert.deepEqual(calls.renews[0]?.request, { namespace: base.namespace, key: 'k', fence: 7n });
});

test('a failed renewal (UNAVAILABLE after retries) is not a lost claim: the next one goes, fn completes', { timeout: 10_000 }, async () => {
  const calls = new RenewingCalls({}, ['UNAVAILABLE', 'UNAVAILABLE']);
  const out = await withIdempotency(calls, { ...base, leaseMs: 60 }, async (claim) => {
    await calls.renewed(3);
    assert.equal(claim.signal.aborted, false);
    return 1;
  });
  assert.equal(out.result, 1);
  assert.equal(calls.completes.length, 1);
});

test('Renew answering STALE_FENCE aborts the signal; the call rejects with its reason and completes nothing', { timeout: 10_000 }, async () => {
  const calls = new RenewingCalls({}, ['OK', 'STALE_FENCE']);
  let reason: unknown;
  await assert.rejects(
    withIdempotency(calls, { ...base, leaseMs: 60 }, async (claim) => {
      await aborted(claim.signal);
      reason = claim.signal.reason;
      return 'finished anyway';
    }),
    (error: unknown) => {
      assert.equal(error, reason);
      assert.ok(error instanceof StaleFenceError);
      assert.deepEqual([error.call, error.answer, error.fence, error.currentFence], ['Renew', 'STALE_FENCE', 7n, 8n]);
      assert.match(error.message, /Renew .* answered STALE_FENCE .* claim was lost/);
      return true;
    },
  );
  assert.deepEqual([calls.completes.length, calls.releases.length], [0, 0]);
  const sent = calls.renews.length;
  await sleep(100);
  assert.equal(calls.renews.length, sent, 'no renewal after the claim was lost');
});

test('Renew answering NOT_FOUND: fn that throws the signal\'s reason rejects with it', { timeout: 10_000 }, async () => {
  const calls = new RenewingCalls({}, ['NOT_FOUND']);
  await assert.rejects(
    withIdempotency(calls, { ...base, leaseMs: 30 }, async (claim) => {
      await calls.renewed(1);
      await aborted(claim.signal);
      claim.signal.throwIfAborted();
    }),
    (error: unknown) => {
      assert.ok(error instanceof OutcomeNotRecordedError && !(error instanceof StaleFenceError));
      assert.deepEqual([error.call, error.answer], ['Renew', 'NOT_FOUND']);
      return true;
    },
  );
  assert.deepEqual([calls.completes.length, calls.releases.length], [0, 0]);
});

test('a lost claim and fn failing otherwise (even retryably): no Release, the lost-claim error caused by fn\'s', { timeout: 10_000 }, async () => {
  const calls = new RenewingCalls({}, ['STALE_FENCE']);
  const failure = new RetryableError('smtp 503');
  await assert.rejects(
    withIdempotency(calls, { ...base, leaseMs: 30 }, async (claim) => {
      await aborted(claim.signal);
      throw failure;
    }),
    (error: unknown) => error instanceof StaleFenceError && error.call === 'Renew' && error.cause === failure,
  );
  assert.deepEqual([calls.completes.length, calls.releases.length], [0, 0]);
});

test('autoRenew: false sends no Renew', { timeout: 10_000 }, async () => {
  const calls = new RenewingCalls();
  await withIdempotency(calls, { ...base, leaseMs: 30, autoRenew: false }, () => sleep(100));
  assert.equal(calls.renews.length, 0);
  assert.equal(calls.completes.length, 1);
});
