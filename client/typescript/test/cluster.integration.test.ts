// DedupClient against a real 3-node dedupd group (env DEDUPD, else
// <repo>/build/server/dedupd, in cluster mode on 127.0.0.1-3): given every
// node's address it finds the leader, and when the leader is SIGKILLed it
// carries on with the new one, unary and coalesced, while every outcome
// completed before the kill still replays.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';

import { argsHash, DedupClient, type DedupClientOptions } from '../src/index.js';
import { type DedupdGroup, startDedupdGroup } from '../src/testing/cluster.js';

let group: DedupdGroup | undefined;
const clients: DedupClient[] = [];
const ns = 'ts-client:cluster';
const hash = argsHash({ cluster: true });

before(async () => {
  // Followers name the leader instead of forwarding: this test watches the
  // client follow the hints to the leader.
  group = await startDedupdGroup({ size: 3, args: ['--forward_to_leader=false'] });
});
after(async () => {
  for (const c of clients) c.close();
  await group?.stop();
});

function newClient(options: Partial<DedupClientOptions>): DedupClient {
  assert.ok(group);
  // An election takes about a second: retries (10 s of backoff at most) must outlast it.
  const c = new DedupClient({ addresses: group.addresses, maxAttempts: 20, backoff: { baseMs: 50, capMs: 500 }, ...options });
  clients.push(c);
  return c;
}

interface Completed {
  readonly key: string;
  readonly fence: bigint;
  readonly result: string;
}

/** Begin (STARTED) and Complete (OK) one fresh key through `client`. */
async function runOnce(client: DedupClient, label: string): Promise<Completed> {
  const key = `${label}/${randomUUID()}`;
  const begun = await client.begin({ namespace: ns, key, argsHash: hash, owner: `owner-${key}` });
  assert.equal(begun.status, 'STARTED', key);
  const result = `result of ${key}`;
  const done = await client.complete({ namespace: ns, key, fence: begun.fence, outcome: 'SUCCESS', result });
  assert.equal(done.status, 'OK', key);
  return { key, fence: begun.fence, result };
}

test('the client follows the leader of a 3-node group, and the new one after the leader is SIGKILLed', async (t) => {
  assert.ok(group);
  const leader = await group.waitForLeader();
  const client = newClient({});
  const coalescing = newClient({ coalesce: true });

  // Begin, Complete, then DUPLICATE with the result for another owner.
  const first = await runOnce(client, 'first');
  const dup = await client.begin({ namespace: ns, key: first.key, argsHash: hash, owner: 'someone-else' });
  assert.deepEqual([dup.status, dup.fence, dup.result.toString()], ['DUPLICATE', first.fence, first.result]);
  assert.equal(client.currentAddress, leader.address, 'calls go to the leader');

  const completed: Completed[] = [first];
  completed.push(...(await Promise.all(Array.from({ length: 10 }, (_, i) => runOnce(client, `unary-${i}`)))));
  completed.push(...(await Promise.all(Array.from({ length: 10 }, (_, i) => runOnce(coalescing, `coalesced-${i}`)))));
  assert.equal(coalescing.currentAddress, leader.address);

  await group.kill(leader.id, 'SIGKILL');
  const killedAt = Date.now();
  const afterKill = await runOnce(client, 'after-kill');
  const elapsedMs = Date.now() - killedAt;
  t.diagnostic(`Begin+Complete after the SIGKILL of node ${leader.id} took ${elapsedMs} ms`);
  assert.ok(elapsedMs < 10_000, `took ${elapsedMs} ms`);
  const newLeader = await group.waitForLeader(10_000, leader.id);
  assert.notEqual(newLeader.id, leader.id);
  assert.equal(client.currentAddress, newLeader.address, 'the client follows the new leader');

  completed.push(afterKill);
  completed.push(...(await Promise.all(Array.from({ length: 5 }, (_, i) => runOnce(coalescing, `coalesced-after-${i}`)))));
  assert.equal(coalescing.currentAddress, newLeader.address);

  // Every outcome recorded before (and after) the kill replays, from a client
  // that starts with the dead node first in its list.
  const fresh = newClient({ addresses: [leader.address, ...group.addresses.filter((a) => a !== leader.address)] });
  for (const c of completed) {
    const again = await fresh.begin({ namespace: ns, key: c.key, argsHash: hash, owner: `later-${c.key}` });
    assert.deepEqual(
      [again.status, again.fence, again.outcome, again.result.toString()],
      ['DUPLICATE', c.fence, 'SUCCESS', c.result],
      c.key,
    );
    const record = (await fresh.get({ namespace: ns, key: c.key })).record;
    assert.deepEqual([record?.state, record?.fence, record?.result.toString()], ['COMPLETED', c.fence, c.result], c.key);
  }
});
