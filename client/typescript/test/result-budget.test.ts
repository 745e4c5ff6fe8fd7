// Item retries (batch-retry.ts) of Begins refused for the result budget of a
// BeginBatch answer (dedupd's --max_batch_response_bytes: UNAVAILABLE with
// reason RESULT_BUDGET, or from an older server only the message "... ask for
// this item again ..."), with a scripted `send`: they go again at once in
// RPCs that fit, without spending rounds, and still give up when nothing
// fits. result-budget.integration.test.ts: against the real dedupd.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { isResultBudgetRefusal, sendWithItemRetries } from '../src/batch-retry.js';
import type { BatchItemResult } from '../src/types.js';

// What dedupd answers an item past the budget (storage/store.h).
const budgetMessage =
  'results: the answers to this request passed their 200000 bytes of stored results; ask for this item again, alone or in a later batch';

interface Answer {
  readonly status: string;
  readonly result: Buffer;
}

/**
 * How a scripted server marks a refusal for the budget: as dedupd does now
 * (reason, here with a message that does not say it, so that only the reason
 * can be what the client reads), or as older servers did (message).
 */
type Mark = 'reason' | 'message';
const marks: readonly Mark[] = ['reason', 'message'];

function budgetRefusal(mark: Mark): BatchItemResult<Answer> {
  return mark === 'reason'
    ? { ok: false, code: GrpcStatus.UNAVAILABLE, message: 'results: over this answer\'s budget', reason: 'RESULT_BUDGET' }
    : { ok: false, code: GrpcStatus.UNAVAILABLE, message: budgetMessage };
}

/** Answers the first `fit` items of every RPC with a stored result and refuses the rest for the budget, recording each RPC's items. */
function fitting(fit: number, sent: string[][], mark: Mark): (items: string[]) => Promise<BatchItemResult<Answer>[]> {
  return async (items) => {
    sent.push(items);
    return items.map((_, i) =>
      i < fit ? { ok: true as const, answer: { status: 'DUPLICATE', result: Buffer.from('stored') } } : budgetRefusal(mark),
    );
  };
}

function policy(maxAttempts: number, sleeps: number[]) {
  return {
    maxAttempts,
    backoff: { baseMs: 1, capMs: 2 },
    random: () => 0.5,
    sleep: async (ms: number) => void sleeps.push(ms),
  };
}

test('the reason marks the refusal', () => {
  assert.ok(isResultBudgetRefusal(budgetRefusal('reason')));
  // Another reason is not one, whatever the message says; nor a code other
  // than UNAVAILABLE (only that one says that nothing happened).
  assert.ok(!isResultBudgetRefusal({ ok: false, code: GrpcStatus.UNAVAILABLE, message: budgetMessage, reason: 'OTHER' }));
  assert.ok(!isResultBudgetRefusal({ ok: false, code: GrpcStatus.ABORTED, message: 'over', reason: 'RESULT_BUDGET' }));
});

test('without a reason the message marks the refusal', () => {
  assert.ok(isResultBudgetRefusal({ ok: false, code: GrpcStatus.UNAVAILABLE, message: budgetMessage }));
  assert.ok(!isResultBudgetRefusal({ ok: false, code: GrpcStatus.UNAVAILABLE, message: 'not leading' }));
  assert.ok(!isResultBudgetRefusal({ ok: false, code: GrpcStatus.ABORTED, message: budgetMessage }));
});

for (const mark of marks) {
  test(`refused items go again at once in RPCs that fit, spending no round (marked by ${mark})`, async () => {
    // With 2 rounds, re-sending the 19 refused together would answer two
    // more and fail 17 items.
    const sent: string[][] = [];
    const sleeps: number[] = [];
    const items = Array.from({ length: 21 }, (_, i) => `o${i}`);
    const results = await sendWithItemRetries(policy(2, sleeps), items, () => true, fitting(2, sent, mark));
    assert.deepEqual(
      results.map((r) => (r.ok ? r.answer.result.toString() : r.message)),
      items.map(() => 'stored'),
    );
    assert.deepEqual(
      sent.map((s) => s.length),
      [21, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1],
    );
    assert.deepEqual(sent.slice(1).flat(), items.slice(2)); // each once, in order
    assert.deepEqual(sleeps, []);
  });

  test(`when nothing fits, the refusals spend rounds like any UNAVAILABLE (marked by ${mark})`, async () => {
    const sent: string[][] = [];
    const sleeps: number[] = [];
    const results = await sendWithItemRetries(policy(3, sleeps), ['o0', 'o1'], () => true, fitting(0, sent, mark));
    assert.deepEqual(
      sent.map((s) => s.length),
      [2, 2, 2],
    );
    assert.equal(sleeps.length, 2);
    for (const r of results) assert.deepEqual(r, budgetRefusal(mark));
  });
}
