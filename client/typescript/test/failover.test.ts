// DedupClient against scripted in-process servers (fake-dedupd.ts): leader
// following (the hop at once, its bound, the deadline kept), moving on to the
// next address, and the safe retries of operations whose outcome is unknown,
// unary, batched and coalesced. cluster.integration.test.ts does the same
// against a real 3-node group.
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { DedupClient, type DedupClientOptions, DedupRpcError } from '../src/index.js';
import { FakeDedupd, fenced, notLeader, outcomeUnknown, type Reply, type Script, started } from './fake-dedupd.js';

const ns = 'ts-client:failover';
const hash = Buffer.alloc(32, 7);
const fakes: FakeDedupd[] = [];
const clients: DedupClient[] = [];

after(() => {
  for (const c of clients) c.close();
  for (const f of fakes) f.stop();
});

async function fake(script: Script): Promise<FakeDedupd> {
  const f = await FakeDedupd.start(script);
  fakes.push(f);
  return f;
}

/** A client whose backoff sleeps are recorded instead of slept. */
function client(options: DedupClientOptions): { client: DedupClient; sleeps: number[] } {
  const sleeps: number[] = [];
  const c = new DedupClient({ sleep: async (ms) => void sleeps.push(ms), ...options });
  clients.push(c);
  return { client: c, sleeps };
}

const always =
  (reply: Reply): Script =>
  () =>
    reply;

function isRpcError(code: number, outcomeUnknownFlag: boolean): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof DedupRpcError, String(error));
    assert.equal(error.codeName, GrpcStatus[code]);
    assert.equal(error.outcomeUnknown, outcomeUnknownFlag);
    return true;
  };
}

async function freePort(): Promise<number> {
  return new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
}

test('addresses: one, comma-separated, or a list; none is refused', () => {
  assert.equal(client({ address: '127.0.0.1:1' }).client.currentAddress, '127.0.0.1:1');
  assert.equal(client({ address: ' 127.0.0.1:1, 127.0.0.2:2 ' }).client.currentAddress, '127.0.0.1:1');
  assert.equal(client({ addresses: ['127.0.0.3:3', '127.0.0.1:1'] }).client.currentAddress, '127.0.0.3:3');
  assert.throws(() => new DedupClient({}), TypeError);
  assert.throws(() => new DedupClient({ address: ' , ' }), TypeError);
});

test("a follower's UNAVAILABLE naming the leader goes on to it at once; later calls go straight there", async () => {
  const leader = await fake((method) => (method === 'Begin' ? { response: started(7) } : { response: { found: false } }));
  const follower = await fake(always(notLeader(leader.address)));
  // The leader is not in the list: the client opens a channel to it.
  const { client: c, sleeps } = client({ address: follower.address });
  const answer = await c.begin({ namespace: ns, key: 'k', argsHash: hash, owner: 'o1' });
  assert.deepEqual([answer.status, answer.fence], ['STARTED', 7n]);
  assert.equal(follower.calls.length, 1);
  assert.equal(leader.calls.length, 1);
  assert.deepEqual(leader.calls[0]?.request, follower.calls[0]?.request);
  assert.deepEqual(sleeps, [], 'a redirect is followed without backoff');
  assert.equal(c.currentAddress, leader.address);

  assert.deepEqual(await c.get({ namespace: ns, key: 'k' }), { record: null });
  assert.equal(follower.calls.length, 1, 'the leader is remembered');
  assert.equal(leader.calls.length, 2);
});

test('redirects are bounded per attempt: maxRedirects hops, then backoff and the next attempt', async () => {
  const addresses: string[] = [];
  // a and b each name the other: a loop that only the bound ends.
  const a = await fake(() => notLeader(addresses[1]));
  const b = await fake(() => notLeader(addresses[0]));
  addresses.push(a.address, b.address);
  const { client: c, sleeps } = client({ addresses, maxAttempts: 2, maxRedirects: 3 });
  await assert.rejects(c.get({ namespace: ns, key: 'k' }), isRpcError(GrpcStatus.UNAVAILABLE, false));
  assert.equal(a.calls.length + b.calls.length, 2 * (1 + 3));
  assert.equal(sleeps.length, 1);
});

test('the attempt deadline is kept across a redirect', async () => {
  const leader = await fake(() => ({ response: { found: false } }));
  const follower = await fake(async () => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    return notLeader(leader.address);
  });
  const { client: c } = client({ address: follower.address, deadlineMs: 3000 });
  await c.get({ namespace: ns, key: 'k' });
  const [first] = follower.calls;
  const [hop] = leader.calls;
  assert.ok(first !== undefined && hop !== undefined);
  assert.ok(hop.receivedAt - first.receivedAt >= 290);
  assert.ok(Math.abs(hop.deadline - first.deadline) < 100, `deadlines ${first.deadline} and ${hop.deadline}`);
  assert.ok(hop.deadline - hop.receivedAt < 3000 - 200, 'the hop did not get a fresh deadline');
});

test('an unreachable address or a follower without a leader: the next address, after backoff', async () => {
  const noLeader = await fake(always(notLeader()));
  const leader = await fake(() => ({ response: started(3) }));
  const down = `127.0.0.1:${await freePort()}`;
  const { client: c, sleeps } = client({
    addresses: [down, noLeader.address, leader.address],
    backoff: { baseMs: 10, capMs: 40 },
    random: () => 0.5,
  });
  const answer = await c.begin({ namespace: ns, key: 'k', argsHash: hash, owner: 'o1' });
  assert.equal(answer.status, 'STARTED');
  assert.deepEqual(sleeps, [5, 10]);
  assert.deepEqual([noLeader.calls.length, leader.calls.length], [1, 1]);
  assert.equal(c.currentAddress, leader.address);
});

test('unknown outcomes are retried as they are: Begin (same owner), Complete (same fence, result), Renew, Get', async () => {
  const answers: Record<string, object> = {
    Begin: started(9),
    Complete: { ...fenced('OK', 9), expires_at: '5' },
    Renew: { ...fenced('OK', 9), lease_expires_at: '4', expires_at: '5' },
    Get: { found: false },
  };
  const server = await fake((method, _request, nth) => (nth === 0 ? outcomeUnknown() : { response: answers[method] ?? {} }));
  const { client: c, sleeps } = client({ address: server.address });
  const begun = await c.begin({ namespace: ns, key: 'k', argsHash: hash, owner: 'owner-1', leaseMs: 1000, waitMs: 5 });
  assert.deepEqual([begun.status, begun.fence], ['STARTED', 9n]);
  const done = await c.complete({ namespace: ns, key: 'k', fence: 9n, outcome: 'SUCCESS', result: 'receipt' });
  assert.equal(done.status, 'OK');
  assert.equal((await c.renew({ namespace: ns, key: 'k', fence: 9n, leaseMs: 2000 })).status, 'OK');
  assert.deepEqual(await c.get({ namespace: ns, key: 'k' }), { record: null });

  for (const method of ['Begin', 'Complete', 'Renew', 'Get']) {
    const calls = server.callsOf(method);
    assert.equal(calls.length, 2, method);
    assert.deepEqual(calls[1]?.request, calls[0]?.request, `${method} was resent unchanged`);
  }
  assert.equal(server.callsOf('Begin')[1]?.request['owner'], 'owner-1');
  assert.equal(server.callsOf('Complete')[1]?.request['fence'], '9');
  assert.equal(String(server.callsOf('Complete')[1]?.request['result']), 'receipt');
  assert.equal(sleeps.length, 4, 'one backoff per retried call');
});

test('Release: a retry after an unknown outcome that finds no claim reports it released', async () => {
  const server = await fake((_method, request, nth) =>
    request['key'] === 'after-unknown' && nth === 0 ? outcomeUnknown() : { response: fenced('NOT_FOUND', 0) },
  );
  const { client: c } = client({ address: server.address });
  assert.deepEqual(await c.release({ namespace: ns, key: 'after-unknown', fence: 4n }), { status: 'OK', fence: 0n });
  assert.equal(server.calls.length, 2);
  // Without an unknown outcome, NOT_FOUND is the answer.
  assert.equal((await c.release({ namespace: ns, key: 'plain', fence: 4n })).status, 'NOT_FOUND');
});

test('retries exhausted after an unknown outcome: ABORTED, outcomeUnknown, even after an UNAVAILABLE', async () => {
  const server = await fake((_m, _r, nth) => (nth === 0 ? outcomeUnknown() : notLeader()));
  const { client: c, sleeps } = client({ address: server.address, maxAttempts: 3 });
  await assert.rejects(c.complete({ namespace: ns, key: 'k', fence: 1n, outcome: 'SUCCESS' }), (error: unknown) => {
    isRpcError(GrpcStatus.ABORTED, true)(error);
    assert.ok(error instanceof DedupRpcError);
    assert.equal(error.method, 'Complete');
    assert.match(error.details, /outcome unknown.*last attempt: UNAVAILABLE/);
    return true;
  });
  assert.equal(server.calls.length, 3);
  assert.equal(sleeps.length, 2);

  const aborted = await fake(always(outcomeUnknown()));
  const { client: c2 } = client({ address: aborted.address, maxAttempts: 2 });
  await assert.rejects(c2.renew({ namespace: ns, key: 'k', fence: 1n }), isRpcError(GrpcStatus.ABORTED, true));
  assert.equal(aborted.calls.length, 2);
});

test('not retried: an anonymous Begin or a Forget whose outcome is unknown, and ABORTED without the trailer', async () => {
  const unknown = await fake(always(outcomeUnknown()));
  const { client: c, sleeps } = client({ address: unknown.address });
  await assert.rejects(c.begin({ namespace: ns, key: 'k', argsHash: hash }), isRpcError(GrpcStatus.ABORTED, true));
  await assert.rejects(c.forget({ namespace: ns, key: 'k' }), isRpcError(GrpcStatus.ABORTED, true));
  assert.equal(unknown.calls.length, 2);

  const plain = await fake(always({ error: { code: GrpcStatus.ABORTED, details: 'something else' } }));
  const { client: c2 } = client({ address: plain.address });
  await assert.rejects(c2.get({ namespace: ns, key: 'k' }), isRpcError(GrpcStatus.ABORTED, false));
  assert.equal(plain.calls.length, 1);
  assert.deepEqual(sleeps, []);
});

const item = (i: number, owner = `owner-${i}`) => ({ namespace: ns, key: `k${i}`, argsHash: hash, owner });

test('beginBatch follows the leader; items ABORTED or UNAVAILABLE go again alone, with their owners', async () => {
  const leader = await fake((_m, request, nth) => {
    const items = request['items'] as { key: string }[];
    if (nth === 0) {
      return {
        response: {
          items: [
            { response: started(1) },
            { error: { code: GrpcStatus.ABORTED, message: 'outcome unknown' } },
            { error: { code: GrpcStatus.UNAVAILABLE, message: 'not the leader' } },
            { error: { code: GrpcStatus.ABORTED, message: 'outcome unknown' } },
          ],
        },
      };
    }
    return { response: { items: items.map((_, j) => ({ response: started(10 + j) })) } };
  });
  const follower = await fake(always(notLeader(leader.address)));
  const { client: c, sleeps } = client({ addresses: [follower.address, leader.address] });
  // Item 3 has no owner: resent, it could not re-enter its claim.
  const items = [item(0), item(1), item(2), item(3, '')];
  const results = await c.beginBatch(items);
  assert.deepEqual(
    results.map((r) => (r.ok ? [r.answer.status, r.answer.fence] : [r.code, r.outcomeUnknown])),
    [['STARTED', 1n], ['STARTED', 10n], ['STARTED', 11n], [GrpcStatus.ABORTED, true]],
  );
  const sent = leader
    .callsOf('BeginBatch')
    .map((call) => (call.request['items'] as { key: string; owner: string }[]).map((i) => [i.key, i.owner]));
  assert.deepEqual(sent, [
    [['k0', 'owner-0'], ['k1', 'owner-1'], ['k2', 'owner-2'], ['k3', '']],
    [['k1', 'owner-1'], ['k2', 'owner-2']],
  ]);
  assert.equal(follower.calls.length, 1);
  assert.equal(sleeps.length, 1);
});

test('coalesced calls follow the leader and retry unknown items; one that stays unknown rejects as unary would', async () => {
  const leader = await fake((method, request, nth) => {
    const items = request['items'] as { key: string; fence?: string }[];
    const unknown = { error: { code: GrpcStatus.ABORTED, message: 'outcome unknown' } };
    if (nth === 0) return { response: { items: items.map(() => unknown) } };
    return {
      response: {
        items: items.map((i, j) =>
          i.key === 'stuck'
            ? unknown
            : { response: method === 'BeginBatch' ? started(20 + j) : { ...fenced('OK', Number(i.fence)), expires_at: '1' } },
        ),
      },
    };
  });
  const follower = await fake(always(notLeader(leader.address)));
  const { client: c } = client({ address: `${follower.address},${leader.address}`, coalesce: true, maxAttempts: 3 });
  const begun = await Promise.all([0, 1, 2].map((i) => c.begin(item(i))));
  assert.deepEqual(begun.map((b) => b.status), ['STARTED', 'STARTED', 'STARTED']);
  const batches = leader.callsOf('BeginBatch');
  assert.equal(batches.length, 2);
  assert.deepEqual(batches[1]?.request, batches[0]?.request, 'the same items, owners included, went again');

  const completed = await Promise.all(
    begun.map((b, i) => c.complete({ namespace: ns, key: `k${i}`, fence: b.fence, outcome: 'SUCCESS', result: `r${i}` })),
  );
  assert.deepEqual(completed.map((d) => d.status), ['OK', 'OK', 'OK']);
  const completes = leader.callsOf('CompleteBatch');
  assert.equal(completes.length, 2);
  assert.deepEqual(completes[1]?.request, completes[0]?.request);

  await assert.rejects(c.begin({ namespace: ns, key: 'stuck', argsHash: hash, owner: 'o' }), (error: unknown) => {
    isRpcError(GrpcStatus.ABORTED, true)(error);
    assert.ok(error instanceof DedupRpcError);
    assert.equal(error.method, 'Begin');
    return true;
  });
  assert.equal(leader.callsOf('BeginBatch').length, 2 + 3, 'maxAttempts rounds');
  assert.equal(follower.calls.length, 1);
});

test('coalesced: an item refused UNAVAILABLE in an otherwise good batch is retried alone after the backoff', async () => {
  // Issue 15: the other items are answered at once; the refused one (ItemError
  // code 14: nothing happened) goes again, as its unary call would have.
  const leader = await fake((_m, request, nth) => {
    const items = request['items'] as { key: string }[];
    return {
      response: {
        items: items.map((i, j) =>
          nth === 0 && i.key === 'k1'
            ? { error: { code: GrpcStatus.UNAVAILABLE, message: `items[${j}]: not the leader any more` } }
            : { response: started(nth * 10 + j + 1) },
        ),
      },
    };
  });
  const { client: c, sleeps } = client({ address: leader.address, coalesce: true, random: () => 0.5 });
  const answers = await Promise.all([0, 1, 2].map((i) => c.begin(item(i))));
  assert.deepEqual(
    answers.map((a) => [a.status, a.fence]),
    [['STARTED', 1n], ['STARTED', 11n], ['STARTED', 3n]],
  );
  const sent = leader
    .callsOf('BeginBatch')
    .map((call) => (call.request['items'] as { key: string; owner: string }[]).map((i) => [i.key, i.owner]));
  assert.deepEqual(sent, [
    [['k0', 'owner-0'], ['k1', 'owner-1'], ['k2', 'owner-2']],
    [['k1', 'owner-1']],
  ]);
  assert.deepEqual(sleeps, [25], 'one full-jitter backoff delay (0.5 x 50 ms) before the retry');
});
