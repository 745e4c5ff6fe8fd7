// A consumer of the packed @dedup/client, in plain JavaScript (ESM): the
// package's entry points resolve from node_modules, its proto file loads,
// and a Begin/Complete round trip works against a real dedupd (env DEDUPD).
// Prints one JSON line with what it saw; exits non-zero on any mismatch.
import assert from 'node:assert/strict';

import { argsHash, DedupClient, StaleFenceError } from '@dedup/client';
import { startDedupd } from '@dedup/client/testing';

const server = await startDedupd();
const client = new DedupClient({ address: server.address });
try {
  const request = { namespace: 'consumer:js', key: 'invoice-1', argsHash: argsHash({ amount: 5 }), owner: 'attempt-1' };
  const begun = await client.begin(request);
  assert.equal(begun.status, 'STARTED');
  assert.equal(typeof begun.fence, 'bigint');
  const completed = await client.complete({ ...request, fence: begun.fence, outcome: 'SUCCESS', result: '{"sent":true}' });
  assert.equal(completed.status, 'OK');
  const again = await client.begin({ ...request, owner: 'attempt-2' });
  assert.equal(again.status, 'DUPLICATE');
  assert.equal(again.result.toString(), '{"sent":true}');

  let runs = 0;
  const once = () => client.withIdempotency({ namespace: 'consumer:js', args: { amount: 7 } }, () => ({ run: ++runs }));
  const [first, second] = [await once(), await once()];
  assert.deepEqual([first.result, first.duplicate, second.result, second.duplicate], [{ run: 1 }, false, { run: 1 }, true]);
  assert.ok(StaleFenceError.prototype instanceof Error);
  console.log(JSON.stringify({ begin: begun.status, complete: completed.status, replay: again.status, fence: String(begun.fence) }));
} finally {
  client.close();
  await server.stop();
}
