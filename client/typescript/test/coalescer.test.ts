// When the Coalescer sends (a lone call at once, calls of one turn together,
// the rest behind a busy slot) and that every caller gets its own item's
// answer or error, against a scripted send function.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { type BatchItemResult, DedupRpcError } from '../src/index.js';
import { Coalescer } from '../src/coalescer.js';

/** A send whose batches stay open until the test resolves them. */
class ScriptedSend {
  readonly batches: number[][] = [];
  private readonly pending: { items: number[]; resolve: (r: BatchItemResult<string>[]) => void; reject: (e: unknown) => void }[] = [];

  readonly send = (items: number[]): Promise<BatchItemResult<string>[]> => {
    this.batches.push([...items]);
    return new Promise((resolve, reject) => this.pending.push({ items, resolve, reject }));
  };

  /** Answers the oldest open batch: "answer-<n>", or an item error for negative n. */
  answerNext(): void {
    const batch = this.pending.shift();
    assert.ok(batch, 'no batch open');
    batch.resolve(
      batch.items.map((n, i) =>
        n >= 0
          ? { ok: true as const, answer: `answer-${n}` }
          : { ok: false as const, code: GrpcStatus.INVALID_ARGUMENT, message: `items[${i}].key: negative` },
      ),
    );
  }

  failNext(error: unknown): void {
    const batch = this.pending.shift();
    assert.ok(batch, 'no batch open');
    batch.reject(error);
  }
}

/** Lets queued microtasks and promise callbacks run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

test('a lone call leaves at once; calls of the same turn share a batch', async () => {
  const s = new ScriptedSend();
  const c = new Coalescer<number, string>('Begin', s.send, () => 1, { maxBatchesInFlight: 1 });
  const first = c.submit(1);
  await settle();
  assert.deepEqual(s.batches, [[1]]);
  s.answerNext();
  assert.equal(await first, 'answer-1');

  const together = [c.submit(2), c.submit(3), c.submit(4)];
  await settle();
  assert.deepEqual(s.batches, [[1], [2, 3, 4]]);
  s.answerNext();
  assert.deepEqual(await Promise.all(together), ['answer-2', 'answer-3', 'answer-4']);
});

test('calls made while every slot is busy leave together when one returns, split at maxBatchItems', async () => {
  const s = new ScriptedSend();
  const c = new Coalescer<number, string>('Begin', s.send, () => 1, { maxBatchesInFlight: 1, maxBatchItems: 3 });
  const all = [c.submit(0)];
  await settle();
  for (let n = 1; n <= 7; n++) {
    all.push(c.submit(n));
    await settle();
  }
  assert.deepEqual(s.batches, [[0]], 'nothing leaves while the slot is busy');
  s.answerNext();
  await settle();
  assert.deepEqual(s.batches, [[0], [1, 2, 3]]);
  s.answerNext();
  await settle();
  s.answerNext();
  await settle();
  s.answerNext();
  assert.deepEqual(s.batches, [[0], [1, 2, 3], [4, 5, 6], [7]]);
  assert.deepEqual(
    await Promise.all(all),
    Array.from({ length: 8 }, (_, n) => `answer-${n}`),
  );
});

test('two slots: the second batch leaves while the first is out', async () => {
  const s = new ScriptedSend();
  const c = new Coalescer<number, string>('Begin', s.send, () => 1, { maxBatchesInFlight: 2 });
  const a = c.submit(1);
  await settle();
  const b = c.submit(2);
  await settle();
  const later = [c.submit(3), c.submit(4)];
  await settle();
  assert.deepEqual(s.batches, [[1], [2]]);
  s.answerNext();
  await settle();
  assert.deepEqual(s.batches, [[1], [2], [3, 4]]);
  s.answerNext();
  s.answerNext();
  assert.deepEqual(await Promise.all([a, b, ...later]), ['answer-1', 'answer-2', 'answer-3', 'answer-4']);
});

test('an item error reaches its caller alone, with the unary message', async () => {
  const s = new ScriptedSend();
  const c = new Coalescer<number, string>('Begin', s.send, () => 1, { maxBatchesInFlight: 1 });
  const calls = [c.submit(1), c.submit(-1), c.submit(2)];
  await settle();
  s.answerNext();
  const [ok1, refused, ok2] = await Promise.allSettled(calls);
  assert.deepEqual([ok1?.status, refused?.status, ok2?.status], ['fulfilled', 'rejected', 'fulfilled']);
  assert.ok(refused?.status === 'rejected');
  const error: unknown = refused.reason;
  assert.ok(error instanceof DedupRpcError);
  assert.equal(error.method, 'Begin');
  assert.equal(error.code, GrpcStatus.INVALID_ARGUMENT);
  assert.equal(error.codeName, 'INVALID_ARGUMENT');
  assert.equal(error.details, 'key: negative');
});

test('a failed batch fails each of its callers with its own error, and the next batch still leaves', async () => {
  const s = new ScriptedSend();
  const c = new Coalescer<number, string>('Begin', s.send, () => 1, { maxBatchesInFlight: 1 });
  const first = c.submit(1);
  await settle();
  const queued = [c.submit(2), c.submit(3)];
  const boom = new DedupRpcError('BeginBatch', GrpcStatus.PERMISSION_DENIED, 'PERMISSION_DENIED', 'no');
  const isOwnBoom = (e: unknown) =>
    e instanceof DedupRpcError && e !== boom && e.method === 'Begin' && e.code === boom.code && e.details === 'no' && e.cause === boom;
  s.failNext(boom);
  await assert.rejects(first, isOwnBoom);
  await settle();
  assert.deepEqual(s.batches, [[1], [2, 3]]);
  s.failNext(boom);
  for (const q of queued) await assert.rejects(q, isOwnBoom);
});

test('a batch refused as too large goes again item by item', async () => {
  const s = new ScriptedSend();
  const c = new Coalescer<number, string>('Begin', s.send, () => 1, { maxBatchesInFlight: 1 });
  const calls = [c.submit(1), c.submit(2), c.submit(3)];
  await settle();
  s.failNext(new DedupRpcError('BeginBatch', GrpcStatus.RESOURCE_EXHAUSTED, 'RESOURCE_EXHAUSTED', 'too large'));
  await settle();
  assert.deepEqual(s.batches, [[1, 2, 3], [1], [2], [3]]);
  s.answerNext();
  s.answerNext();
  s.answerNext();
  assert.deepEqual(await Promise.all(calls), ['answer-1', 'answer-2', 'answer-3']);
});

test('a batch closes before 3 MiB of items; a send that throws rejects its callers', async () => {
  const s = new ScriptedSend();
  const c = new Coalescer<number, string>('Begin', s.send, () => 1 << 20, { maxBatchesInFlight: 1 });
  const calls = [0, 1, 2, 3, 4, 5, 6].map((n) => c.submit(n));
  await settle();
  s.answerNext();
  await settle();
  s.answerNext();
  await settle();
  s.answerNext();
  assert.deepEqual(s.batches, [[0, 1, 2], [3, 4, 5], [6]]);
  assert.deepEqual(await Promise.all(calls), [0, 1, 2, 3, 4, 5, 6].map((n) => `answer-${n}`));

  const throwing = new Coalescer<number, string>(
    'Complete',
    () => {
      throw new Error('sync failure');
    },
    () => 1,
  );
  await assert.rejects(throwing.submit(1), /sync failure/);
});
