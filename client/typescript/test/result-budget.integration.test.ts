// Many callers of one key with a large result against a real dedupd (env
// DEDUPD) whose BeginBatch answers carry at most two such results
// (--max_batch_response_bytes): every caller still gets the DUPLICATE with
// the result, coalesced and through beginBatch.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';

import { argsHash, DedupClient } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

let server: Dedupd;
let client: DedupClient;
let coalescing: DedupClient;
const ns = 'ts-client:budget';
const hash = argsHash({ budget: true });
const result = Buffer.alloc(100_000, 'r');
const callers = 200;

before(async () => {
  // Two 100 KB results fit one answer.
  server = await startDedupd({
    args: ['--max_result_bytes=150000', '--max_batch_response_bytes=200000', '--event_log=off'],
  });
  client = new DedupClient({ address: server.address });
  coalescing = new DedupClient({ address: server.address, coalesce: true });
});
after(async () => {
  client.close();
  coalescing.close();
  await server.stop();
});

async function storedKey(): Promise<string> {
  const key = randomUUID();
  const begun = await client.begin({ namespace: ns, key, argsHash: hash, owner: 'writer' });
  assert.equal(begun.status, 'STARTED');
  const done = await client.complete({ namespace: ns, key, fence: begun.fence, outcome: 'SUCCESS', result });
  assert.equal(done.status, 'OK');
  return key;
}

test('concurrent coalesced Begins of one large result all get it', async () => {
  const key = await storedKey();
  const answers = await Promise.allSettled(
    Array.from({ length: callers }, (_, i) => coalescing.begin({ namespace: ns, key, argsHash: hash, owner: `o${i}` })),
  );
  const wrong = answers.filter((a) => a.status !== 'fulfilled' || a.value.status !== 'DUPLICATE' || !a.value.result.equals(result));
  assert.equal(wrong.length, 0, `${wrong.length} callers, e.g. ${String(wrong[0]?.status === 'rejected' ? wrong[0].reason : '')}`);
});

test('beginBatch gets every item its result', async () => {
  const key = await storedKey();
  const results = await client.beginBatch(Array.from({ length: callers }, (_, i) => ({ namespace: ns, key, argsHash: hash, owner: `o${i}` })));
  const wrong = results.filter((r) => !r.ok || r.answer.status !== 'DUPLICATE' || !r.answer.result.equals(result));
  assert.equal(wrong.length, 0, `${wrong.length} items, e.g. ${JSON.stringify(wrong[0])}`);
});
