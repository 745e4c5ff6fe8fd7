// How withIdempotency maps the authority's answers to results and errors,
// against a scripted fake of the three calls it makes. (The same paths run
// against a real dedupd in idempotency.integration.test.ts.)
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  argsHashHex,
  type BeginRequest,
  type BeginResponse,
  type CheckpointRequest,
  type CheckpointResponse,
  type CompleteRequest,
  type CompleteResponse,
  ConflictError,
  ExpiredError,
  type FencedStatus,
  type IdempotencyCalls,
  InUseTimeoutError,
  OutcomeNotRecordedError,
  type ReleaseRequest,
  type ReleaseResponse,
  ReplayedError,
  RetryableError,
  StaleFenceError,
  withIdempotency,
} from '../src/index.js';

function beginAnswer(fields: Partial<BeginResponse>): BeginResponse {
  return {
    status: 'STARTED', fence: 7n, takeover: false, outcome: null, result: Buffer.alloc(0), createdAt: 1,
    completedAt: 0, expiresAt: 2, leaseExpiresAt: 3, attempts: 1, retryAfterMs: 0, checkpoint: null, rerun: false,
    tombstoneExpiresAt: 0, ...fields,
  };
}

class FakeCalls implements IdempotencyCalls {
  readonly begins: BeginRequest[] = [];
  readonly completes: CompleteRequest[] = [];
  readonly releases: ReleaseRequest[] = [];
  constructor(
    private readonly beginAnswers: BeginResponse[],
    private readonly completeStatus: FencedStatus = 'OK',
  ) {}
  async begin(request: BeginRequest): Promise<BeginResponse> {
    this.begins.push(request);
    const answer = this.beginAnswers.shift();
    if (answer === undefined) throw new Error('unexpected Begin');
    return answer;
  }
  async complete(request: CompleteRequest): Promise<CompleteResponse> {
    this.completes.push(request);
    return { status: this.completeStatus, fence: this.completeStatus === 'STALE_FENCE' ? 9n : request.fence, expiresAt: 0 };
  }
  async release(request: ReleaseRequest): Promise<ReleaseResponse> {
    this.releases.push(request);
    return { status: 'OK', fence: request.fence };
  }
}

const base = { namespace: 'billing:send_invoice', args: { amount: 5, customer: 'c1' } };

test('STARTED runs fn and completes SUCCESS with its JSON result', async () => {
  const calls = new FakeCalls([beginAnswer({ status: 'STARTED', fence: 7n })]);
  const out = await withIdempotency(calls, { ...base, key: 'k1', leaseMs: 1000 }, (claim) => ({ id: 'inv-1', fence: String(claim.fence) }));
  assert.deepEqual(out, { result: { id: 'inv-1', fence: '7' }, duplicate: false, outcome: 'SUCCESS', fence: 7n, takeover: false, rerun: false });
  assert.equal(calls.begins[0]?.key, 'k1');
  assert.equal(calls.begins[0]?.leaseMs, 1000);
  assert.equal(calls.begins[0]?.waitMs, 0);
  assert.equal(Buffer.from(calls.begins[0]?.argsHash ?? []).toString('hex'), argsHashHex(base.args));
  assert.match(calls.begins[0]?.owner ?? '', /^[0-9a-f-]{36}$/);
  assert.deepEqual(calls.completes, [{ namespace: base.namespace, key: 'k1', fence: 7n, outcome: 'SUCCESS', result: '{"id":"inv-1","fence":"7"}' }]);
});

test('without a key, the key is the canonical args hash in hex', async () => {
  const calls = new FakeCalls([beginAnswer({})]);
  await withIdempotency(calls, { namespace: 'n', args: { b: 1, a: 2 } }, () => null);
  assert.equal(calls.begins[0]?.key, argsHashHex({ a: 2, b: 1 }));
});

test('an undefined result is stored as null', async () => {
  const calls = new FakeCalls([beginAnswer({})]);
  const out = await withIdempotency(calls, base, () => undefined);
  assert.equal(out.result, null);
  assert.equal(calls.completes[0]?.result, 'null');
});

test('DUPLICATE SUCCESS returns the stored result without running fn', async () => {
  const calls = new FakeCalls([beginAnswer({ status: 'DUPLICATE', outcome: 'SUCCESS', fence: 3n, result: Buffer.from('{"id":"inv-1"}') })]);
  const out = await withIdempotency(calls, base, () => assert.fail('fn must not run'));
  assert.deepEqual(out, { result: { id: 'inv-1' }, duplicate: true, outcome: 'SUCCESS', fence: 3n, takeover: false, rerun: false });
  assert.equal(calls.completes.length, 0);
});

test('DUPLICATE ERROR throws ReplayedError carrying the stored error', async () => {
  const stored = { name: 'InvoiceError', message: 'invalid amount', code: 'INVALID_AMOUNT' };
  const calls = new FakeCalls([beginAnswer({ status: 'DUPLICATE', outcome: 'ERROR', result: Buffer.from(JSON.stringify(stored)) })]);
  await assert.rejects(withIdempotency(calls, base, () => assert.fail('fn must not run')), (error: unknown) => {
    assert.ok(error instanceof ReplayedError);
    assert.deepEqual(error.stored, stored);
    assert.equal(error.message, 'invalid amount');
    assert.equal(error.code, 'INVALID_AMOUNT');
    return true;
  });
});

test('a stored error that is not JSON replays as its raw text', async () => {
  const calls = new FakeCalls([beginAnswer({ status: 'DUPLICATE', outcome: 'ERROR', result: Buffer.from('card declined') })]);
  await assert.rejects(withIdempotency(calls, base, () => 1), { name: 'ReplayedError', message: 'card declined' });
});

test('CONFLICT throws ConflictError', async () => {
  const calls = new FakeCalls([beginAnswer({ status: 'CONFLICT', fence: 4n })]);
  await assert.rejects(withIdempotency(calls, { ...base, key: 'k' }, () => 1), (error: unknown) => {
    assert.ok(error instanceof ConflictError);
    assert.match(error.message, /conflict/);
    assert.equal(error.key, 'k');
    return true;
  });
});

test('a permanent failure is completed as ERROR {name, message, code} and rethrown', async () => {
  const calls = new FakeCalls([beginAnswer({ fence: 5n })]);
  const failure = Object.assign(new RangeError('invalid amount'), { code: 'INVALID_AMOUNT' });
  await assert.rejects(withIdempotency(calls, base, () => { throw failure; }), (error: unknown) => error === failure);
  assert.equal(calls.completes[0]?.outcome, 'ERROR');
  assert.deepEqual(JSON.parse(String(calls.completes[0]?.result)), { name: 'RangeError', message: 'invalid amount', code: 'INVALID_AMOUNT' });
  assert.equal(calls.releases.length, 0);
});

test('a RetryableError releases the claim and is rethrown; nothing is stored', async () => {
  const calls = new FakeCalls([beginAnswer({ fence: 6n })]);
  const failure = new RetryableError('smtp timeout');
  await assert.rejects(withIdempotency(calls, base, async () => { throw failure; }), (error: unknown) => error === failure);
  assert.deepEqual(calls.releases, [{ namespace: base.namespace, key: argsHashHex(base.args), fence: 6n }]);
  assert.equal(calls.completes.length, 0);
});

test('isRetryable marks other errors retryable', async () => {
  const calls = new FakeCalls([beginAnswer({})]);
  const isRetryable = (error: unknown): boolean => error instanceof Error && error.message === 'ECONNRESET';
  await assert.rejects(withIdempotency(calls, { ...base, isRetryable }, () => { throw new Error('ECONNRESET'); }), /ECONNRESET/);
  assert.equal(calls.releases.length, 1);
  assert.equal(calls.completes.length, 0);
});

test('Complete answering STALE_FENCE throws StaleFenceError', async () => {
  const calls = new FakeCalls([beginAnswer({ fence: 8n })], 'STALE_FENCE');
  await assert.rejects(withIdempotency(calls, base, () => 'done'), (error: unknown) => {
    assert.ok(error instanceof StaleFenceError);
    assert.ok(error instanceof OutcomeNotRecordedError);
    assert.equal(error.fence, 8n);
    assert.equal(error.currentFence, 9n);
    return true;
  });
});

test('STALE_FENCE after a permanent failure throws StaleFenceError caused by it', async () => {
  const calls = new FakeCalls([beginAnswer({})], 'STALE_FENCE');
  const failure = new Error('boom');
  await assert.rejects(withIdempotency(calls, base, () => { throw failure; }), (error: unknown) => {
    assert.ok(error instanceof StaleFenceError);
    assert.equal(error.cause, failure);
    return true;
  });
});

test('Complete answering NOT_FOUND throws OutcomeNotRecordedError', async () => {
  const calls = new FakeCalls([beginAnswer({})], 'NOT_FOUND');
  await assert.rejects(withIdempotency(calls, base, () => 'done'), (error: unknown) => {
    assert.ok(error instanceof OutcomeNotRecordedError && !(error instanceof StaleFenceError));
    assert.equal(error.answer, 'NOT_FOUND');
    return true;
  });
});

test('IN_USE begins again with wait_ms and a fresh owner, then takes the outcome', async () => {
  let clock = 0;
  const calls = new FakeCalls([
    beginAnswer({ status: 'IN_USE', retryAfterMs: 500 }),
    beginAnswer({ status: 'DUPLICATE', outcome: 'SUCCESS', result: Buffer.from('42') }),
  ]);
  const originalBegin = calls.begin.bind(calls);
  // The server holds a waiting Begin: let the fake clock show it.
  calls.begin = async (r) => {
    clock += r.waitMs ?? 0;
    return originalBegin(r);
  };
  const out = await withIdempotency(calls, { ...base, waitPerCallMs: 3000, now: () => clock }, () => assert.fail('fn must not run'));
  assert.deepEqual([out.result, out.duplicate], [42, true]);
  assert.deepEqual(calls.begins.map((b) => b.waitMs), [0, 3000]);
  assert.notEqual(calls.begins[0]?.owner, calls.begins[1]?.owner);
});

test('still IN_USE at the deadline throws InUseTimeoutError', async () => {
  let clock = 0;
  const sleeps: number[] = [];
  const answers = Array.from({ length: 10 }, () => beginAnswer({ status: 'IN_USE', retryAfterMs: 50 }));
  const calls = new FakeCalls(answers);
  const originalBegin = calls.begin.bind(calls);
  calls.begin = async (r) => {
    clock += r.waitMs ?? 0;
    return originalBegin(r);
  };
  await assert.rejects(
    withIdempotency(calls, { ...base, deadlineMs: 2500, waitPerCallMs: 1000, now: () => clock, sleep: async (ms) => void sleeps.push(ms) }, () => 1),
    InUseTimeoutError,
  );
  // 0, then waits of 1000, 1000 and the 500 left.
  assert.deepEqual(calls.begins.map((b) => b.waitMs), [0, 1000, 1000, 500]);
  assert.deepEqual(sleeps, []);
});

test('a server that answers IN_USE without waiting is not spun on', async () => {
  let clock = 0;
  const sleeps: number[] = [];
  const calls = new FakeCalls([
    beginAnswer({ status: 'IN_USE', retryAfterMs: 200 }),
    beginAnswer({ status: 'IN_USE', retryAfterMs: 200 }),
    beginAnswer({ status: 'DUPLICATE', outcome: 'SUCCESS', result: Buffer.from('1') }),
  ]);
  const sleep = async (ms: number): Promise<void> => {
    sleeps.push(ms);
    clock += ms;
  };
  await withIdempotency(calls, { ...base, now: () => clock, sleep }, () => 1);
  assert.deepEqual(sleeps, [200]);
});

test('bad args are refused before any call', async () => {
  const calls = new FakeCalls([]);
  await assert.rejects(withIdempotency(calls, { namespace: 'n', args: { n: NaN } }, () => 1), /NaN is not a JSON number/);
  assert.equal(calls.begins.length, 0);
});

test('EXPIRED throws ExpiredError naming when and how it ran; fn does not run, nothing is sent after', async () => {
  const completedAt = Date.UTC(2026, 10, 20, 8, 30);
  const calls = new FakeCalls([
    beginAnswer({ status: 'EXPIRED', outcome: 'SUCCESS', fence: 4n, createdAt: completedAt - 5, completedAt, attempts: 2, tombstoneExpiresAt: completedAt + 9 }),
  ]);
  await assert.rejects(withIdempotency(calls, { ...base, key: 'k' }, () => assert.fail('fn must not run')), (error: unknown) => {
    assert.ok(!(error instanceof ReplayedError));
    assert.ok(error instanceof ExpiredError);
    assert.deepEqual(
      [error.key, error.fence, error.outcome, error.completedAt, error.createdAt, error.attempts, error.tombstoneExpiresAt],
      ['k', 4n, 'SUCCESS', completedAt, completedAt - 5, 2, completedAt + 9],
    );
    assert.match(error.message, /2026-11-20T08:30:00.000Z/);
    assert.match(error.message, /no longer kept/);
    return true;
  });
  assert.equal(calls.begins[0]?.acceptRerun, undefined);
  assert.deepEqual([calls.completes.length, calls.releases.length], [0, 0]);
});

test('acceptRerun is sent with Begin; a rerun STARTED shows in the claim and the result', async () => {
  const calls = new FakeCalls([beginAnswer({ fence: 9n, rerun: true, attempts: 2 })]);
  let rerun: boolean | undefined;
  const out = await withIdempotency(calls, { ...base, acceptRerun: true }, (claim) => {
    rerun = claim.rerun;
    return 'again';
  });
  assert.equal(calls.begins[0]?.acceptRerun, true);
  assert.deepEqual([rerun, out.rerun, out.fence, out.duplicate], [true, true, 9n, false]);
});

/** FakeCalls with checkpoint(), answering as scripted. */
class CheckpointingCalls extends FakeCalls {
  readonly checkpoints: CheckpointRequest[] = [];
  constructor(begin: BeginResponse, private readonly checkpointStatus: FencedStatus = 'OK') {
    super([begin]);
  }
  async checkpoint(request: CheckpointRequest): Promise<CheckpointResponse> {
    this.checkpoints.push(request);
    const status = this.checkpointStatus;
    return { status, fence: status === 'STALE_FENCE' ? request.fence + 1n : request.fence, leaseExpiresAt: 0 };
  }
}

test('a takeover sees the last checkpoint JSON-decoded; claim.checkpoint stores JSON with the lease', async () => {
  const previous = { step: 'charged', data: Buffer.from('{"charge":"ch_1"}'), fence: 6n, recordedAt: 55 };
  const calls = new CheckpointingCalls(beginAnswer({ fence: 7n, takeover: true, checkpoint: previous }));
  const out = await withIdempotency(calls, { ...base, leaseMs: 900 }, async (claim) => {
    assert.deepEqual(claim.lastCheckpoint, { step: 'charged', data: { charge: 'ch_1' }, raw: previous.data, fence: 6n, recordedAt: 55 });
    await claim.checkpoint('shipped', { parcel: 12 });
    await claim.checkpoint('noted');
    return claim.signal.aborted;
  });
  assert.equal(out.result, false);
  assert.deepEqual(calls.checkpoints, [
    { namespace: base.namespace, key: argsHashHex(base.args), fence: 7n, step: 'shipped', data: '{"parcel":12}', leaseMs: 900 },
    { namespace: base.namespace, key: argsHashHex(base.args), fence: 7n, step: 'noted', data: 'null', leaseMs: 900 },
  ]);
});

test('a checkpoint that is not JSON is still given, raw, with data undefined', async () => {
  const raw = Buffer.from([0xff, 0x00]);
  const calls = new FakeCalls([beginAnswer({ checkpoint: { step: 's', data: raw, fence: 1n, recordedAt: 2 } })]);
  const out = await withIdempotency(calls, base, (claim) => [claim.lastCheckpoint?.data === undefined, claim.lastCheckpoint?.raw.equals(raw)]);
  assert.deepEqual(out.result, [true, true]);
});

for (const refusal of ['STALE_FENCE', 'NOT_FOUND', 'ALREADY_COMPLETED'] as const) {
  test(`a checkpoint refused ${refusal} loses the claim: the signal aborts, nothing is completed`, async () => {
    const calls = new CheckpointingCalls(beginAnswer({ fence: 7n }), refusal);
    let aborted = false;
    await assert.rejects(
      withIdempotency(calls, { ...base, autoRenew: false }, async (claim) => {
        claim.signal.addEventListener('abort', () => (aborted = true));
        await claim.checkpoint('step-1', 1);
        return 'not reached';
      }),
      (error: unknown) => {
        assert.ok(error instanceof OutcomeNotRecordedError);
        assert.deepEqual([error.call, error.answer, error.fence], ['Checkpoint', refusal, 7n]);
        assert.equal(error instanceof StaleFenceError, refusal === 'STALE_FENCE');
        return true;
      },
    );
    assert.equal(aborted, true);
    assert.deepEqual([calls.completes.length, calls.releases.length], [0, 0]);
  });
}

test('a function that swallows the refused checkpoint still does not report success', async () => {
  const calls = new CheckpointingCalls(beginAnswer({ fence: 7n }), 'STALE_FENCE');
  await assert.rejects(
    withIdempotency(calls, { ...base, autoRenew: false }, async (claim) => {
      await claim.checkpoint('step-1').catch(() => undefined);
      // Once lost, a checkpoint is not even sent.
      await assert.rejects(claim.checkpoint('step-2'), StaleFenceError);
      return 'done anyway';
    }),
    (error: unknown) => error instanceof StaleFenceError && error.call === 'Checkpoint',
  );
  assert.deepEqual([calls.checkpoints.length, calls.completes.length], [1, 0]);
});
