// DedupClient with `coalesce` against a real dedupd (env DEDUPD, else
// <repo>/build/server/dedupd): concurrent callers get the answers unary calls
// give (STARTED, one winner per contested key, DUPLICATE replays, a refused
// item's unary error). Coalescer.test.ts shows when batches leave.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { argsHash, DedupClient, DedupRpcError } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

let server: Dedupd;
let client: DedupClient;
const ns = 'ts-client:coalesce';
const hash = argsHash({ coalesce: true });

before(async () => {
  server = await startDedupd();
  client = new DedupClient({ address: server.address, coalesce: { maxBatchesInFlight: 1 } });
});
after(async () => {
  client.close();
  await server.stop();
});

test('concurrent callers: each STARTED then OK then DUPLICATE; one winner per contested key', async () => {
  const prefix = randomUUID();
  const callers = 40;
  const statuses = await Promise.all(
    Array.from({ length: callers }, async (_, i) => {
      const key = `${prefix}/${i}`;
      const begun = await client.begin({ namespace: ns, key, argsHash: hash, owner: `owner-${i}` });
      const completed = await client.complete({ namespace: ns, key, fence: begun.fence, outcome: 'SUCCESS', result: `r${i}` });
      const again = await client.begin({ namespace: ns, key, argsHash: hash, owner: `later-${i}` });
      const contested = await client.begin({ namespace: ns, key: `${prefix}/shared`, argsHash: hash, owner: `owner-${i}` });
      assert.equal(again.fence, begun.fence);
      assert.equal(again.result.toString(), `r${i}`);
      return [begun.status, completed.status, again.status, contested.status];
    }),
  );
  for (const [begun, completed, again] of statuses) assert.deepEqual([begun, completed, again], ['STARTED', 'OK', 'DUPLICATE']);
  const contested = statuses.map((s) => s[3]);
  assert.equal(contested.filter((s) => s === 'STARTED').length, 1);
  assert.equal(contested.filter((s) => s === 'IN_USE').length, callers - 1);
});

test('a refused call rejects with the unary error; its batch mates are answered', async () => {
  const prefix = randomUUID();
  const [ok, refused] = await Promise.allSettled([
    client.begin({ namespace: ns, key: `${prefix}/fine`, argsHash: hash }),
    client.begin({ namespace: ns, key: '', argsHash: hash }),
  ]);
  assert.equal(ok?.status, 'fulfilled');
  assert.ok(refused?.status === 'rejected');
  const error: unknown = refused.reason;
  assert.ok(error instanceof DedupRpcError);
  assert.equal(error.method, 'Begin');
  assert.equal(error.code, GrpcStatus.INVALID_ARGUMENT);
  assert.match(error.details, /^key: /);
});
