// Coalesced checkpoints against scripted in-process servers (fake-dedupd.ts):
// CheckpointBatch follows the leader and re-sends only the items refused with
// UNAVAILABLE or ABORTED, with the same fence, step and data; a server without
// CheckpointBatch (UNIMPLEMENTED: a dedupd older than it) gets the items as
// unary Checkpoints, and the client remembers that. The real dedupd's side is
// checkpoint-batch.integration.test.ts.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { type CheckpointResponse, DedupClient, type DedupClientOptions, DedupRpcError } from '../src/index.js';
import { FakeDedupd, fenced, notLeader, type Reply, type Script } from './fake-dedupd.js';

const ns = 'ts-client:checkpoint-batch';
const fakes: FakeDedupd[] = [];
const clients: DedupClient[] = [];

after(() => {
  for (const c of clients) c.close();
  for (const f of fakes) f.stop();
});

async function fake(script: Script, only?: readonly string[]): Promise<FakeDedupd> {
  const f = await FakeDedupd.start(script, only);
  fakes.push(f);
  return f;
}

/** A coalescing client whose backoff sleeps are recorded instead of slept. */
function client(options: DedupClientOptions): { client: DedupClient; sleeps: number[] } {
  const sleeps: number[] = [];
  const c = new DedupClient({ sleep: async (ms) => void sleeps.push(ms), coalesce: true, ...options });
  clients.push(c);
  return { client: c, sleeps };
}

interface ItemWire {
  key: string;
  fence: string;
  step: string;
  data: Buffer;
}

const checkpoint = (i: number) => ({ namespace: ns, key: `k${i}`, fence: BigInt(10 + i), step: `step-${i}`, data: `{"i":${i}}` });
const okFor = (i: { fence: string }) => ({ ...fenced('OK', Number(i.fence)), lease_expires_at: '5' });
const summary = (items: unknown) => (items as ItemWire[]).map((i) => [i.key, i.fence, i.step, i.data.toString()]);
const statuses = (answers: CheckpointResponse[]) => answers.map((a) => [a.status, a.fence]);

test('coalesced checkpoints follow the leader; items UNAVAILABLE or ABORTED go again alone, unchanged', async () => {
  const leader = await fake((_m, request, nth) => {
    const items = request['items'] as ItemWire[];
    return {
      response: {
        items: items.map((i, j) =>
          nth === 0 && i.key === 'k1'
            ? { error: { code: GrpcStatus.UNAVAILABLE, message: `items[${j}]: not the leader any more` } }
            : nth === 0 && i.key === 'k2'
              ? { error: { code: GrpcStatus.ABORTED, message: `items[${j}]: outcome unknown` } }
              : { response: okFor(i) },
        ),
      },
    };
  });
  const follower = await fake(() => notLeader(leader.address));
  const { client: c, sleeps } = client({ address: `${follower.address},${leader.address}`, random: () => 0.5 });
  const answers = await Promise.all([0, 1, 2, 3].map((i) => c.checkpoint(checkpoint(i))));
  assert.deepEqual(statuses(answers), [['OK', 10n], ['OK', 11n], ['OK', 12n], ['OK', 13n]]);
  assert.deepEqual(
    leader.callsOf('CheckpointBatch').map((call) => summary(call.request['items'])),
    [
      [
        ['k0', '10', 'step-0', '{"i":0}'],
        ['k1', '11', 'step-1', '{"i":1}'],
        ['k2', '12', 'step-2', '{"i":2}'],
        ['k3', '13', 'step-3', '{"i":3}'],
      ],
      [['k1', '11', 'step-1', '{"i":1}'], ['k2', '12', 'step-2', '{"i":2}']],
    ],
  );
  assert.deepEqual(leader.callsOf('Checkpoint'), [], 'nothing went unary');
  assert.equal(follower.calls.length, 1, 'the follower was asked once, then the leader it named');
  assert.deepEqual(sleeps, [25], 'one full-jitter backoff (0.5 x 50 ms) before the retry round');
});

test('a coalesced checkpoint whose outcome stays unknown rejects as its unary call would: ABORTED, outcomeUnknown', async () => {
  const leader = await fake((_m, request) => ({
    response: {
      items: (request['items'] as ItemWire[]).map((i, j) =>
        i.key === 'k1' ? { error: { code: GrpcStatus.ABORTED, message: `items[${j}]: outcome unknown` } } : { response: okFor(i) },
      ),
    },
  }));
  const { client: c } = client({ address: leader.address, maxAttempts: 3 });
  const [good, stuck] = await Promise.allSettled([c.checkpoint(checkpoint(0)), c.checkpoint(checkpoint(1))]);
  assert.equal(good?.status, 'fulfilled');
  assert.ok(stuck?.status === 'rejected');
  const error: unknown = stuck.reason;
  assert.ok(error instanceof DedupRpcError);
  assert.deepEqual([error.method, error.code, error.outcomeUnknown], ['Checkpoint', GrpcStatus.ABORTED, true]);
  assert.equal(leader.callsOf('CheckpointBatch').length, 3, 'maxAttempts rounds');
});

/** What dedupd answers a request it cannot parse (server/unparseable_requests.cc). */
const unparsed = (method: string): Reply => ({
  error: {
    code: GrpcStatus.INVALID_ARGUMENT,
    details:
      `request: cannot be parsed as the request of /dedup.v1.Dedup/${method} ` +
      '(malformed protobuf, or a string field that is not valid UTF-8)',
  },
});

// How servers without CheckpointBatch refuse it: a plain gRPC server, and
// every dedupd that has Checkpoint (its interceptor for unparseable requests
// rewrites the UNIMPLEMENTED; seen from such a build).
const withoutBatch: Record<string, Reply> = {
  UNIMPLEMENTED: { error: { code: GrpcStatus.UNIMPLEMENTED, details: 'Method not found: dedup.v1.Dedup/CheckpointBatch' } },
  'an older dedupd': unparsed('CheckpointBatch'),
};
const badStep: Reply = { error: { code: GrpcStatus.INVALID_ARGUMENT, details: 'step: must be 1..128 bytes' } };

for (const [server, refusal] of Object.entries(withoutBatch)) {
  test(`a server without CheckpointBatch (${server}): unary Checkpoints, each its own answer; remembered`, async () => {
    const old = await fake((method, request) => {
      if (method === 'CheckpointBatch') return refusal;
      const i = request as unknown as ItemWire;
      return i.step === '' ? badStep : { response: okFor(i) };
    });
    const { client: c } = client({ address: old.address });
    const first = await Promise.allSettled([
      c.checkpoint(checkpoint(0)),
      c.checkpoint({ ...checkpoint(1), step: '' }),
      c.checkpoint(checkpoint(2)),
    ]);
    const error = (e: unknown) => e instanceof DedupRpcError && [e.method, e.codeName, e.details];
    assert.deepEqual(
      first.map((r) => (r.status === 'fulfilled' ? r.value.status : error(r.reason))),
      ['OK', ['Checkpoint', 'INVALID_ARGUMENT', 'step: must be 1..128 bytes'], 'OK'],
    );
    assert.equal(old.callsOf('CheckpointBatch').length, 1);
    assert.deepEqual(
      old.callsOf('Checkpoint').map((call) => summary([call.request])[0]),
      [['k0', '10', 'step-0', '{"i":0}'], ['k1', '11', '', '{"i":1}'], ['k2', '12', 'step-2', '{"i":2}']],
    );

    // Remembered: later checkpoints go unary at once, batch form included.
    const second = await Promise.all([3, 4].map((i) => c.checkpoint(checkpoint(i))));
    assert.deepEqual(statuses(second), [['OK', 13n], ['OK', 14n]]);
    const batch = await c.checkpointBatch([checkpoint(5)]);
    assert.deepEqual(batch, [{ ok: true, answer: { status: 'OK', fence: 15n, leaseExpiresAt: 5 } }]);
    assert.equal(old.callsOf('CheckpointBatch').length, 1, 'CheckpointBatch was not asked again');
    assert.equal(old.callsOf('Checkpoint').length, 6);
  });
}

test('a batch refused as unparseable because a string in it is not UTF-8: its items go unary, and batching goes on', async () => {
  // As dedupd answers a request with a lone surrogate (protobufjs writes it
  // as bytes that are not UTF-8), unary or batched.
  const server = await fake((method, request) => {
    const items = method === 'CheckpointBatch' ? (request['items'] as ItemWire[]) : [request as unknown as ItemWire];
    // The lone surrogate arrives as U+FFFD.
    if (items.some((i) => i.key.includes('\uFFFD'))) return unparsed(method);
    if (method === 'Checkpoint') return { response: okFor(items[0] as ItemWire) };
    return { response: { items: items.map((i) => ({ response: okFor(i) })) } };
  });
  const { client: c } = client({ address: server.address });
  const [good, bad] = await Promise.allSettled([c.checkpoint(checkpoint(0)), c.checkpoint({ ...checkpoint(1), key: 'k\uD800' })]);
  assert.equal(good?.status === 'fulfilled' && good.value.status, 'OK');
  assert.ok(bad?.status === 'rejected' && bad.reason instanceof DedupRpcError);
  assert.deepEqual([bad.reason.method, bad.reason.codeName], ['Checkpoint', 'INVALID_ARGUMENT']);
  assert.deepEqual(server.calls.map((call) => call.method), ['CheckpointBatch', 'Checkpoint', 'Checkpoint']);
  const later = await Promise.all([2, 3].map((i) => c.checkpoint(checkpoint(i))));
  assert.deepEqual(statuses(later), [['OK', 12n], ['OK', 13n]]);
  assert.equal(server.callsOf('CheckpointBatch').length, 2, 'not remembered: later checkpoints are batched again');
});

test('a server serving only unary Checkpoint (grpc-js: UNIMPLEMENTED for the rest): coalesced checkpoints answered', async () => {
  const old = await fake((_m, request) => ({ response: okFor(request as unknown as ItemWire) }), ['Checkpoint']);
  const { client: c } = client({ address: old.address });
  const answers = await Promise.all([0, 1, 2].map((i) => c.checkpoint(checkpoint(i))));
  assert.deepEqual(statuses(answers), [['OK', 10n], ['OK', 11n], ['OK', 12n]]);
  assert.deepEqual(old.calls.map((call) => call.method), ['Checkpoint', 'Checkpoint', 'Checkpoint']);
  // The same for a direct checkpointBatch on a fresh client.
  const { client: direct } = client({ address: old.address, coalesce: false });
  const results = await direct.checkpointBatch([checkpoint(3), checkpoint(4)]);
  assert.deepEqual(results.map((r) => r.ok && r.answer.fence), [13n, 14n]);
});

test('a group being upgraded: UNIMPLEMENTED in a retry round sends the remaining items unary', async () => {
  // The first node answers item k1 UNAVAILABLE, then the next round meets a
  // node without CheckpointBatch.
  const node = await fake((method, request, nth) => {
    if (method === 'Checkpoint') return { response: okFor(request as unknown as ItemWire) };
    if (nth > 0) return { error: { code: GrpcStatus.UNIMPLEMENTED, details: 'unknown method CheckpointBatch' } };
    return {
      response: {
        items: (request['items'] as ItemWire[]).map((i, j) =>
          i.key === 'k1' ? { error: { code: GrpcStatus.UNAVAILABLE, message: `items[${j}]: not the leader` } } : { response: okFor(i) },
        ),
      },
    };
  });
  const { client: c } = client({ address: node.address });
  const answers = await Promise.all([0, 1, 2].map((i) => c.checkpoint(checkpoint(i))));
  assert.deepEqual(statuses(answers), [['OK', 10n], ['OK', 11n], ['OK', 12n]]);
  assert.deepEqual(node.calls.map((call) => call.method), ['CheckpointBatch', 'CheckpointBatch', 'Checkpoint']);
  assert.deepEqual(summary([node.callsOf('Checkpoint')[0]?.request]), [['k1', '11', 'step-1', '{"i":1}']]);
});
