// DedupClient.beginBatch / completeBatch against a real dedupd (env DEDUPD,
// else <repo>/build/server/dedupd): typed per-item results, whole-call errors,
// and a retry after a lost answer re-entering every item.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';

import {
  Client as GrpcClient,
  credentials,
  Metadata,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServiceDefinition,
  type ServiceError,
  status as GrpcStatus,
  type sendUnaryData,
} from '@grpc/grpc-js';

import { argsHash, type BatchItemResult, type BeginBatchItem, DedupClient, DedupRpcError } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';
import * as wire from '../src/wire.js';

let server: Dedupd;
let client: DedupClient;
const ns = 'ts-client:batch';
const hash = argsHash({ batch: true });

before(async () => {
  server = await startDedupd();
  client = new DedupClient({ address: server.address });
});
after(async () => {
  client.close();
  await server.stop();
});

function freshItems(n: number): BeginBatchItem[] {
  const prefix = randomUUID();
  return Array.from({ length: n }, (_, i) => ({ namespace: ns, key: `${prefix}/${i}`, argsHash: hash, owner: `owner-${i}` }));
}

/** The answer of an item that must have one. */
function answer<T>(result: BatchItemResult<T> | undefined, i: number): T {
  assert.ok(result?.ok, `items[${i}]: ${result === undefined || result.ok ? 'missing' : result.message}`);
  return result.answer;
}

test('beginBatch STARTED with an item refused, completeBatch OK, then DUPLICATE replays', async () => {
  const items: BeginBatchItem[] = freshItems(6);
  items[3] = { namespace: ns, key: '' };
  const started = await client.beginBatch(items);
  assert.equal(started.length, 6);
  const refused = started[3];
  assert.ok(refused !== undefined && !refused.ok);
  assert.equal(refused.code, GrpcStatus.INVALID_ARGUMENT);
  assert.match(refused.message, /^items\[3\]\.key: /);

  const live = [0, 1, 2, 4, 5];
  const fences = live.map((i) => {
    const a = answer(started[i], i);
    assert.equal(a.status, 'STARTED');
    return a.fence;
  });
  assert.equal(new Set(fences).size, live.length, 'fresh keys get distinct fences');

  const completed = await client.completeBatch(
    live.map((i, j) => ({ namespace: ns, key: items[i]?.key ?? '', fence: fences[j] ?? 0n, outcome: 'SUCCESS', result: `r${i}` })),
  );
  completed.forEach((c, j) => assert.equal(answer(c, j).status, 'OK'));

  const replayed = await client.beginBatch(live.map((i) => ({ namespace: ns, key: items[i]?.key ?? '', argsHash: hash, owner: 'later' })));
  replayed.forEach((r, j) => {
    const a = answer(r, j);
    assert.equal(a.status, 'DUPLICATE');
    assert.equal(a.fence, fences[j]);
    assert.equal(a.outcome, 'SUCCESS');
    assert.equal(a.result.toString(), `r${live[j]}`);
  });
});

test('a stale fence is that item\'s answer; the other items complete', async () => {
  const items = freshItems(3);
  const fences = (await client.beginBatch(items)).map((r, i) => answer(r, i).fence);
  const key1 = items[1]?.key ?? '';
  assert.equal((await client.release({ namespace: ns, key: key1, fence: fences[1] ?? 0n })).status, 'OK');
  const current = await client.begin({ namespace: ns, key: key1, argsHash: hash, owner: 'someone-else' });
  assert.equal(current.status, 'STARTED');

  const completed = await client.completeBatch(
    items.map((item, i) => ({ namespace: ns, key: item.key, fence: fences[i] ?? 0n, outcome: 'SUCCESS' as const })),
  );
  assert.deepEqual(
    completed.map((c, i) => answer(c, i).status),
    ['OK', 'STALE_FENCE', 'OK'],
  );
  assert.equal(answer(completed[1], 1).fence, current.fence);
});

test('the same key twice: same owner re-enters, another owner is IN_USE', async () => {
  const [item] = freshItems(1);
  assert.ok(item);
  const results = await client.beginBatch([item, item, { ...item, owner: 'other' }]);
  const [a, b, c] = results.map((r, i) => answer(r, i));
  assert.deepEqual([a?.status, b?.status, c?.status], ['STARTED', 'STARTED', 'IN_USE']);
  assert.equal(a?.fence, b?.fence);
  assert.equal(c?.fence, a?.fence);
});

test('an empty or oversized batch rejects the whole call with INVALID_ARGUMENT', async () => {
  for (const n of [0, 1001]) {
    await assert.rejects(client.beginBatch(freshItems(n)), (error: unknown) => {
      assert.ok(error instanceof DedupRpcError);
      assert.equal(error.code, GrpcStatus.INVALID_ARGUMENT);
      assert.equal(error.method, 'BeginBatch');
      assert.equal(error.details, `items: must be 1..1000 items, got ${n}`);
      return true;
    });
  }
  await assert.rejects(client.completeBatch([]), /items: must be 1\.\.1000 items, got 0/);
});

// The case the owner rule exists for: dedupd applied the batch but its answer
// was lost (a proxy forwards the first attempt, then says UNAVAILABLE). The
// retry re-sends each item's owner, so every item re-enters its own claim.
test('a retried beginBatch whose first answer was lost re-enters every item', async () => {
  const upstream = new GrpcClient(server.address, credentials.createInsecure());
  const method = wire.methodDefinition<wire.BeginBatchRequestWire, wire.BeginBatchResponseWire>('BeginBatch');
  let calls = 0;
  const proxy = new Server();
  const service = wire.packageDefinition()[wire.SERVICE_NAME] as ServiceDefinition;
  proxy.addService(service, {
    BeginBatch: (
      call: ServerUnaryCall<wire.BeginBatchRequestWire, wire.BeginBatchResponseWire>,
      callback: sendUnaryData<wire.BeginBatchResponseWire>,
    ) => {
      const attempt = ++calls;
      upstream.makeUnaryRequest(
        method.path, method.requestSerialize, method.responseDeserialize, call.request, new Metadata(),
        { deadline: Date.now() + 5000 },
        (error: ServiceError | null, response?: wire.BeginBatchResponseWire) => {
          if (attempt === 1) callback({ code: GrpcStatus.UNAVAILABLE, details: 'proxy: answer lost' });
          else callback(error, response);
        },
      );
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    proxy.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, p) => (error ? reject(error) : resolve(p))),
  );
  const retrying = new DedupClient({ address: `127.0.0.1:${port}`, sleep: async () => {} });
  try {
    const items = freshItems(20);
    const results = await retrying.beginBatch(items);
    assert.equal(calls, 2);
    for (const [i, r] of results.entries()) {
      const a = answer(r, i);
      assert.equal(a.status, 'STARTED');
      assert.equal(a.attempts, 1);
      const record = (await client.get({ namespace: ns, key: items[i]?.key ?? '' })).record;
      assert.equal(record?.fence, a.fence);
      assert.equal(record?.owner, `owner-${i}`);
    }
  } finally {
    retrying.close();
    upstream.close();
    proxy.forceShutdown();
  }
});
