// Coalesced checkpoints against a real dedupd (env DEDUPD, else
// <repo>/build/server/dedupd) with /metrics: concurrent checkpoints, raw and
// through withIdempotency's claim.checkpoint, leave as fewer CheckpointBatch
// RPCs than calls (dedup_request_duration_seconds_count{method=...}) and none
// as unary Checkpoint; a takeover Begin carries the last one; a stale fence
// or an invalid item is answered for its item alone; the byte cap keeps
// batches of 60 KB checkpoints under the message limit; a batch the server
// cannot parse (a lone surrogate) goes unary without ending batching.
// checkpoint-batch.test.ts covers leader following, item retries and the
// fallback to unary calls on servers without CheckpointBatch.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { type ClaimCheckpoint, DedupClient, DedupRpcError, StaleFenceError } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

let server: Dedupd;
let plain: DedupClient;
let coalescing: DedupClient;
const ns = 'ts-client:checkpoint-batch';

before(async () => {
  server = await startDedupd({ metrics: true, args: ['--min_lease_ms=100'] });
  plain = new DedupClient({ address: server.address });
  // One batch on the wire at a time: calls made meanwhile share the next.
  coalescing = new DedupClient({ address: server.address, coalesce: { maxBatchesInFlight: 1 } });
});
after(async () => {
  plain?.close();
  coalescing?.close();
  await server?.stop();
});

/**
 * The server's RPC counts (sample 0 when absent), its recorded Checkpoint
 * answers, and the CheckpointBatch requests it could not parse (those never
 * reach the method, so its count leaves them out).
 */
async function counts(): Promise<{ batches: number; unary: number; recorded: number; unparsed: number }> {
  assert.ok(server.metricsAddress, 'dedupd printed its metrics address');
  const text = await (await fetch(`http://${server.metricsAddress}/metrics`)).text();
  const sample = (name: string): number => {
    const line = text.split('\n').find((l) => l.startsWith(`${name} `));
    return line === undefined ? 0 : Number(line.slice(name.length + 1));
  };
  return {
    batches: sample('dedup_request_duration_seconds_count{method="CheckpointBatch"}'),
    unary: sample('dedup_request_duration_seconds_count{method="Checkpoint"}'),
    recorded: sample('dedup_checkpoint_total{result="ok"}'),
    unparsed: sample('dedup_invalid_requests_total{field="request",method="CheckpointBatch"}'),
  };
}

/** Runs `work`, then says how many CheckpointBatch / unary Checkpoint RPCs and recorded checkpoints it cost. */
async function costOf<T>(
  work: () => Promise<T>,
): Promise<{ value: T; batches: number; unary: number; recorded: number; unparsed: number }> {
  const before = await counts();
  const value = await work();
  const after = await counts();
  return {
    value,
    batches: after.batches - before.batches,
    unary: after.unary - before.unary,
    recorded: after.recorded - before.recorded,
    unparsed: after.unparsed - before.unparsed,
  };
}

async function begun(key: string, owner = 'w'): Promise<bigint> {
  const b = await plain.begin({ namespace: ns, key, owner, leaseMs: 60_000 });
  assert.equal(b.status, 'STARTED');
  return b.fence;
}

test('concurrent checkpoints through one coalescing client: each OK and recorded, in fewer CheckpointBatch RPCs than calls', async () => {
  const calls = 20;
  const keys = Array.from({ length: calls }, () => randomUUID());
  const fences = await Promise.all(keys.map((key) => begun(key)));
  const cost = await costOf(() =>
    Promise.all(
      keys.map((key, i) =>
        coalescing.checkpoint({ namespace: ns, key, fence: fences[i] as bigint, step: `s${i}`, data: `{"i":${i}}` }),
      ),
    ),
  );
  assert.deepEqual(cost.value.map((a) => a.status), Array<string>(calls).fill('OK'));
  assert.deepEqual(cost.value.map((a) => a.fence), fences);
  assert.ok(cost.batches >= 1 && cost.batches < calls, `${calls} checkpoints in ${cost.batches} CheckpointBatch RPCs`);
  assert.equal(cost.batches, 1, 'made in one turn with one batch slot: one RPC');
  assert.equal(cost.unary, 0, 'none went as a unary Checkpoint');
  assert.equal(cost.recorded, calls);
  const stored = await Promise.all(keys.map((key) => plain.get({ namespace: ns, key })));
  assert.deepEqual(
    stored.map((g) => [g.record?.checkpoint?.step, g.record?.checkpoint?.data.toString()]),
    keys.map((_, i) => [`s${i}`, `{"i":${i}}`]),
  );
});

test("coalescing client's withIdempotency: claim.checkpoint as CheckpointBatch; a takeover gets each key's last one", { timeout: 30_000 }, async () => {
  const keys = Array.from({ length: 4 }, () => randomUUID());
  let resume!: () => void;
  const takenOver = new Promise<void>((resolve) => (resume = resolve));
  const reached: Promise<bigint>[] = [];
  const firsts: Promise<unknown>[] = [];

  // autoRenew off and a short lease: the first owners stop (a frozen
  // process) after two checkpoints each, and their leases lapse.
  const cost = await costOf(async () => {
    for (const key of keys) {
      let checkpointed!: (fence: bigint) => void;
      reached.push(new Promise<bigint>((resolve) => (checkpointed = resolve)));
      firsts.push(
        coalescing.withIdempotency({ namespace: ns, key, args: { key }, leaseMs: 300, autoRenew: false }, async (claim) => {
          await claim.checkpoint('charged', { key, n: 1 });
          await claim.checkpoint('shipped', { key, n: 2 });
          checkpointed(claim.fence);
          await takenOver;
          await claim.checkpoint('late', { key, n: 3 });
          return 'must not complete';
        }),
      );
    }
    return Promise.all(reached);
  });
  const firstFences = cost.value;
  assert.equal(cost.recorded, 2 * keys.length);
  assert.equal(cost.unary, 0, 'no claim.checkpoint went unary');
  assert.ok(cost.batches < 2 * keys.length, `${2 * keys.length} claim.checkpoint calls in ${cost.batches} CheckpointBatch RPCs`);

  // The takeovers' Begins wait on the server until each lease lapses.
  const seen: (ClaimCheckpoint | null)[] = [];
  const seconds = await Promise.all(
    keys.map((key, i) =>
      coalescing.withIdempotency({ namespace: ns, key, args: { key }, leaseMs: 10_000 }, (claim) => {
        assert.equal(claim.takeover, true);
        seen[i] = claim.lastCheckpoint;
        return 'resumed';
      }),
    ),
  );
  seconds.forEach((second, i) => {
    const last = seen[i];
    assert.deepEqual([last?.step, last?.data, last?.fence], ['shipped', { key: keys[i], n: 2 }, firstFences[i]]);
    assert.ok(second.fence > (firstFences[i] as bigint));
  });

  // The old owners' next checkpoints (one batch) are each STALE_FENCE.
  resume();
  const lost = await Promise.allSettled(firsts);
  lost.forEach((r, i) => {
    assert.ok(r.status === 'rejected');
    assert.ok(r.reason instanceof StaleFenceError, String(r.reason));
    assert.deepEqual([r.reason.call, r.reason.fence, r.reason.currentFence], ['Checkpoint', firstFences[i], seconds[i]?.fence]);
  });
});

test('a stale fence answers STALE_FENCE for its item only; its batch mates are recorded', async () => {
  const [stale, fresh1, fresh2] = [randomUUID(), randomUUID(), randomUUID()];
  const old = await plain.begin({ namespace: ns, key: stale, owner: 'old', leaseMs: 100 });
  // Waits on the server until the old lease lapses, then takes over.
  const current = await plain.begin({ namespace: ns, key: stale, owner: 'new', leaseMs: 60_000, waitMs: 5000 });
  assert.deepEqual([current.status, current.takeover], ['STARTED', true]);
  const [f1, f2] = await Promise.all([begun(fresh1), begun(fresh2)]);

  const cost = await costOf(() =>
    Promise.all([
      coalescing.checkpoint({ namespace: ns, key: fresh1, fence: f1, step: 'one' }),
      coalescing.checkpoint({ namespace: ns, key: stale, fence: old.fence, step: 'too late' }),
      coalescing.checkpoint({ namespace: ns, key: fresh2, fence: f2, step: 'two' }),
    ]),
  );
  assert.deepEqual(
    cost.value.map((a) => [a.status, a.fence]),
    [['OK', f1], ['STALE_FENCE', current.fence], ['OK', f2]],
  );
  assert.deepEqual([cost.batches, cost.unary, cost.recorded], [1, 0, 2], 'one CheckpointBatch, two items recorded');
  assert.equal((await plain.get({ namespace: ns, key: stale })).record?.checkpoint, null, 'nothing recorded for the stale item');
  assert.equal((await plain.get({ namespace: ns, key: fresh2 })).record?.checkpoint?.step, 'two');
});

test('an invalid item (empty step) fails alone with INVALID_ARGUMENT naming step; the others are recorded', async () => {
  const keys = [randomUUID(), randomUUID(), randomUUID()];
  const fences = await Promise.all(keys.map((key) => begun(key)));
  const cost = await costOf(() =>
    Promise.allSettled(
      keys.map((key, i) => coalescing.checkpoint({ namespace: ns, key, fence: fences[i] as bigint, step: i === 1 ? '' : `step-${i}` })),
    ),
  );
  const [first, invalid, third] = cost.value;
  assert.equal(first?.status === 'fulfilled' && first.value.status, 'OK');
  assert.equal(third?.status === 'fulfilled' && third.value.status, 'OK');
  assert.ok(invalid?.status === 'rejected');
  const error: unknown = invalid.reason;
  assert.ok(error instanceof DedupRpcError, String(error));
  assert.deepEqual([error.method, error.code], ['Checkpoint', GrpcStatus.INVALID_ARGUMENT]);
  assert.match(error.details, /^step: /, 'the unary message, without the batch position');
  assert.deepEqual([cost.batches, cost.unary, cost.recorded], [1, 0, 2]);

  // The batch form keeps the server's item position.
  const direct = await plain.checkpointBatch([
    { namespace: ns, key: keys[0] as string, fence: fences[0] as bigint, step: 'again' },
    { namespace: ns, key: keys[1] as string, fence: fences[1] as bigint, step: '' },
  ]);
  assert.ok(direct[0]?.ok === true && direct[0].answer.status === 'OK');
  assert.ok(direct[1]?.ok === false);
  assert.equal(direct[1].code, GrpcStatus.INVALID_ARGUMENT);
  assert.match(direct[1].message, /^items\[1\]\.step: /);
});

test('checkpoints of 60 KB each: batches stay under the message limit (a few RPCs, not one per item)', { timeout: 60_000 }, async () => {
  const calls = 100;
  const keys = Array.from({ length: calls }, () => randomUUID());
  const fences = await Promise.all(keys.map((key) => begun(key)));
  const cost = await costOf(() =>
    Promise.all(
      keys.map((key, i) =>
        coalescing.checkpoint({ namespace: ns, key, fence: fences[i] as bigint, step: 'big', data: Buffer.alloc(60_000, i) }),
      ),
    ),
  );
  assert.deepEqual(cost.value.map((a) => a.status), Array<string>(calls).fill('OK'));
  // About 6 MB: two batches under the 3 MiB cap. Without the cap one batch
  // over the server's 4 MiB is refused and every item then goes alone.
  assert.ok(cost.batches >= 2 && cost.batches <= 3, `${calls} checkpoints of 60 KB in ${cost.batches} CheckpointBatch RPCs`);
  assert.deepEqual([cost.unary, cost.recorded], [0, calls]);
  const stored = (await plain.get({ namespace: ns, key: keys[calls - 1] as string })).record?.checkpoint?.data;
  assert.deepEqual(stored, Buffer.alloc(60_000, calls - 1));
});

test('a batch dedupd cannot parse (a key with a lone surrogate): its items go unary, the bad one alone refused; batching goes on', async () => {
  const keys = [randomUUID(), randomUUID()];
  const fences = await Promise.all(keys.map((key) => begun(key)));
  const cost = await costOf(() =>
    Promise.allSettled([
      coalescing.checkpoint({ namespace: ns, key: keys[0] as string, fence: fences[0] as bigint, step: 'fine' }),
      coalescing.checkpoint({ namespace: ns, key: 'lone \uD800 surrogate', fence: 1n, step: 'bad' }),
    ]),
  );
  const [fine, bad] = cost.value;
  assert.equal(fine?.status === 'fulfilled' && fine.value.status, 'OK');
  assert.ok(bad?.status === 'rejected' && bad.reason instanceof DedupRpcError, String(bad));
  assert.deepEqual([bad.reason.method, bad.reason.code], ['Checkpoint', GrpcStatus.INVALID_ARGUMENT]);
  assert.match(bad.reason.details, /cannot be parsed as the request of \/dedup\.v1\.Dedup\/Checkpoint /);
  // The batch refused unparsed, then each item unary (the bad one, unparsed
  // too, is not counted as a Checkpoint either).
  assert.deepEqual([cost.unparsed, cost.batches, cost.unary, cost.recorded], [1, 0, 1, 1]);

  // Not taken for a server without CheckpointBatch: the next ones are batched.
  const later = await costOf(() =>
    Promise.all(keys.map((key, i) => coalescing.checkpoint({ namespace: ns, key, fence: fences[i] as bigint, step: 'later' }))),
  );
  assert.deepEqual(later.value.map((a) => a.status), ['OK', 'OK']);
  assert.deepEqual([later.batches, later.unary, later.unparsed], [1, 0, 0]);
});
