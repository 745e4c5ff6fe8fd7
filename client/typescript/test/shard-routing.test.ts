// DedupClient against a sharded cluster (in-process nodes, fake-shards.ts):
// each call goes to its key's group's leader, batches split per group and
// merged back in order (coalesced ones too), the map refreshed when an
// answer's epoch rises (at most once a second), leader hints followed, and
// without a map (a single node, or a failed fetch) every call goes where it
// went before sharding.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { DedupClient, type DedupClientOptions } from '../src/index.js';
import { ShardRouting } from '../src/shard-map.js';
import { fenceOf, groupOf, keyIn, keysPerGroup, NS, ShardNode, shardMap } from './fake-shards.js';

const nodes: ShardNode[] = [];
const clients: DedupClient[] = [];

after(() => {
  for (const c of clients) c.close();
  for (const n of nodes) n.stop();
});

async function cluster(count = 3, serveMap = true): Promise<ShardNode[]> {
  const started = await Promise.all(Array.from({ length: count }, () => ShardNode.start(serveMap)));
  nodes.push(...started);
  const addresses = started.map((n) => n.address);
  for (const n of started) n.map = shardMap(1, addresses, addresses);
  return started;
}

function client(address: string, options: DedupClientOptions = {}): DedupClient {
  const c = new DedupClient({ address, maxAttempts: 3, sleep: async () => {}, ...options });
  clients.push(c);
  return c;
}

function assertLanded(cluster: ShardNode[], keys: string[], method: string): void {
  cluster.forEach((node, g) => {
    assert.deepEqual(
      node.keys(method),
      keys.filter((k) => groupOf(k, cluster.length) === g),
      `${method} on node ${g}`,
    );
  });
}

test('each call goes to its group leader; the map is fetched once, from the given address', async () => {
  const c3 = await cluster();
  const c = client((c3[0] as ShardNode).address);
  const keys = keysPerGroup(3, 4);
  for (const key of keys) {
    const answer = await c.begin({ namespace: NS, key, owner: 'o' });
    assert.equal(answer.fence, BigInt(fenceOf(key)));
    await c.get({ namespace: NS, key });
  }
  assertLanded(c3, keys, 'Begin');
  assertLanded(c3, keys, 'Get');
  assert.deepEqual(
    c3.map((n) => n.mapCalls),
    [1, 0, 0],
  );
  assert.equal(c.shardMap?.epoch, 1n);
  // The last node that answered as a (group's) leader.
  assert.equal(c.currentAddress, (c3[groupOf(keys[keys.length - 1] as string, 3)] as ShardNode).address);
});

test('a batch is split per group and answered in order', async () => {
  const c3 = await cluster();
  const c = client((c3[0] as ShardNode).address);
  const keys = keysPerGroup(3, 5);
  const answers = await c.beginBatch(keys.map((key) => ({ namespace: NS, key, owner: 'o' })));
  assert.deepEqual(
    answers.map((a) => (a.ok ? a.answer.fence : -1n)),
    keys.map((k) => BigInt(fenceOf(k))),
  );
  assertLanded(c3, keys, 'BeginBatch');
  const done = await c.completeBatch(
    keys.map((key) => ({ namespace: NS, key, fence: BigInt(fenceOf(key)), outcome: 'SUCCESS' as const })),
  );
  assert.deepEqual(
    done.map((a) => (a.ok ? a.answer.fence : -1n)),
    keys.map((k) => BigInt(fenceOf(k))),
  );
  assertLanded(c3, keys, 'CompleteBatch');
});

test('coalesced calls go to their groups in batches', async () => {
  const c3 = await cluster();
  const c = client((c3[0] as ShardNode).address, { coalesce: { maxBatchesInFlight: 1 } });
  const keys = keysPerGroup(3, 10);
  const answers = await Promise.all(keys.map((key) => c.begin({ namespace: NS, key, owner: 'o' })));
  assert.deepEqual(
    answers.map((a) => a.fence),
    keys.map((k) => BigInt(fenceOf(k))),
  );
  c3.forEach((node, g) => {
    assert.deepEqual([...node.keys('BeginBatch')].sort(), keys.filter((k) => groupOf(k, 3) === g).sort());
  });
});

test('a higher epoch refreshes the map, at most once a second', async () => {
  const c3 = await cluster();
  const [a, b] = c3 as [ShardNode, ShardNode, ShardNode];
  const c = client(a.address);
  const key = keyIn(0, 3);
  await c.get({ namespace: NS, key });
  assert.deepEqual(a.keys('Get'), [key]);
  // Group 0 moves to node b; the nodes now say epoch 2.
  const all = c3.map((n) => n.address);
  for (const n of c3) {
    n.map = shardMap(2, [b.address, b.address, (c3[2] as ShardNode).address], all);
    n.trailers = { 'dedup-shard-epoch': '2' };
  }
  await c.get({ namespace: NS, key }); // learns the epoch: too soon to fetch
  await c.get({ namespace: NS, key });
  assert.equal(
    c3.reduce((sum, n) => sum + n.mapCalls, 0),
    1,
  );
  assert.deepEqual(a.keys('Get'), [key, key, key]);
  await delay(1050);
  await c.get({ namespace: NS, key });
  assert.equal(c.shardMap?.epoch, 2n);
  assert.deepEqual(b.keys('Get'), [key]);
  await delay(1050);
  await c.get({ namespace: NS, key }); // the same epoch: no further fetch
  assert.equal(
    c3.reduce((sum, n) => sum + n.mapCalls, 0),
    2,
  );
});

test("a dedup-leader hint moves its group's guess only", async () => {
  const c3 = await cluster();
  const [a, b, z] = c3 as [ShardNode, ShardNode, ShardNode];
  const c = client(a.address);
  const key = keyIn(0, 3);
  a.trailers = { 'dedup-leader': z.address };
  await c.begin({ namespace: NS, key, owner: 'o' });
  await c.begin({ namespace: NS, key, owner: 'o' });
  assert.deepEqual(a.keys('Begin'), [key]);
  assert.deepEqual(z.keys('Begin'), [key]);
  const other = keyIn(1, 3);
  await c.begin({ namespace: NS, key: other, owner: 'o' });
  assert.deepEqual(b.keys('Begin'), [other]);
});

test('without a map every call goes to the first address, batches unsplit', async () => {
  const single = await cluster(3, false);
  const failing = await cluster(3);
  for (const n of failing) n.mapError = GrpcStatus.INTERNAL;
  for (const c3 of [single, failing]) {
    const first = c3[0] as ShardNode;
    const c = client(c3.map((n) => n.address).join(','));
    const keys = keysPerGroup(3, 3);
    for (const key of keys) await c.begin({ namespace: NS, key, owner: 'o' });
    await c.beginBatch(keys.map((key) => ({ namespace: NS, key, owner: 'o' })));
    assert.deepEqual(first.keys('Begin'), keys);
    assert.deepEqual(first.keys('BeginBatch'), keys);
    assert.equal(first.rpcs.filter((m) => m === 'BeginBatch').length, 1);
    for (const n of c3.slice(1)) assert.deepEqual(n.calls, []);
    assert.equal(c.shardMap, undefined);
  }
  assert.equal((failing[0] as ShardNode).mapCalls, 1);
});

test('UNIMPLEMENTED is never asked again; another failure is, a second later', async () => {
  const unimplemented = await cluster(1);
  const failing = await cluster(3);
  (unimplemented[0] as ShardNode).mapError = GrpcStatus.UNIMPLEMENTED;
  for (const n of failing) n.mapError = GrpcStatus.INTERNAL;
  const one = client((unimplemented[0] as ShardNode).address);
  const three = client((failing[0] as ShardNode).address);
  await one.get({ namespace: NS, key: 'k1' });
  await three.get({ namespace: NS, key: 'k1' });
  for (const n of failing) n.mapError = undefined;
  await delay(1050);
  const key = keyIn(2, 3);
  await one.get({ namespace: NS, key });
  await three.get({ namespace: NS, key });
  assert.equal((unimplemented[0] as ShardNode).mapCalls, 1);
  assert.equal((failing[0] as ShardNode).mapCalls, 2);
  assert.deepEqual((failing[2] as ShardNode).keys('Get'), [key]);
  assert.equal(three.shardMap?.epoch, 1n);
});

test('batch rpcs: one per group', async () => {
  const c3 = await cluster();
  const c = client((c3[0] as ShardNode).address);
  await c.beginBatch(keysPerGroup(3, 4).map((key) => ({ namespace: NS, key, owner: 'o' })));
  assert.deepEqual(
    c3.map((n) => n.rpcs.filter((m) => m === 'BeginBatch').length),
    [1, 1, 1],
  );
});

test('a redirect is followed; one to an address outside the map refreshes it', async () => {
  const c3 = await cluster();
  const [a, b, z] = c3 as [ShardNode, ShardNode, ShardNode];
  const [stranger] = await cluster(1);
  const s = stranger as ShardNode;
  const c = client(a.address);
  const key = keyIn(0, 3);
  a.redirectTo = s.address;
  const answer = await c.begin({ namespace: NS, key, owner: 'o' });
  assert.equal(answer.fence, BigInt(fenceOf(key)));
  assert.deepEqual(s.keys('Begin'), [key]);
  const moved = shardMap(2, [s.address, b.address, z.address]);
  for (const n of [...c3, s]) n.map = moved;
  await delay(1050);
  await c.begin({ namespace: NS, key, owner: 'o' });
  assert.equal(c.shardMap?.epoch, 2n);
  assert.deepEqual(s.keys('Begin'), [key, key]);
});

test("a group leader that cannot be reached: its calls move to the group's next replica", async () => {
  const c3 = await cluster();
  const [a, b, z] = c3 as [ShardNode, ShardNode, ShardNode];
  const c = client(a.address);
  await c.get({ namespace: NS, key: 'k1' }); // the map
  b.stop();
  const keys = keysPerGroup(3, 3);
  const answers = await c.beginBatch(keys.map((key) => ({ namespace: NS, key, owner: 'o' })));
  assert.deepEqual(
    answers.map((x) => (x.ok ? x.answer.fence : -1n)),
    keys.map((k) => BigInt(fenceOf(k))),
  );
  // Group 1's replicas are [a, b, z]: after b, z.
  assert.deepEqual(
    [...z.keys('BeginBatch')].sort(),
    keys.filter((k) => groupOf(k, 3) !== 0).sort(),
  );
  assert.deepEqual(
    a.keys('BeginBatch'),
    keys.filter((k) => groupOf(k, 3) === 0),
  );
});

test('failed fetches back off up to a minute; a map resets the interval', () => {
  let now = 0;
  const routing = new ShardRouting(() => now);
  const fetchedAt: number[] = [];
  for (; now < 200_000; now += 500) {
    if (!routing.startFetch()) continue;
    fetchedAt.push(now / 1000);
    routing.fetchFailed(GrpcStatus.DEADLINE_EXCEEDED);
  }
  assert.deepEqual(fetchedAt, [0, 1, 3, 7, 15, 31, 63, 127, 191]);
  now += 64_000;
  assert.ok(routing.startFetch());
  routing.fetched(shardMap(1, ['a:1']));
  assert.equal(routing.current?.epoch, 1n);
  routing.sawEpoch('2');
  now += 999;
  assert.equal(routing.startFetch(), false);
  now += 1;
  assert.ok(routing.startFetch());
});
