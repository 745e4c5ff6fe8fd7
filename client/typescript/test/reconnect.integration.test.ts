// A DedupClient whose dedupd (env DEDUPD) crashed and came back on the same
// port and data dir is answered again promptly, though its calls failed fast
// meanwhile: its channels reconnect on a short backoff (RECONNECT_OPTIONS in
// security.ts), not gRPC's default one (1 s, growing 1.6x to 120 s). The
// Python and C++ clients' equivalents: tests/python/integration/
// test_reconnect.py, tests/client/reconnect_test.cc.
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { DedupClient, DedupRpcError } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

// What the test allows between the server listening again and the first call
// it answers.
const reconnectLimitMs = 2000;

async function expectUnavailable(call: Promise<unknown>): Promise<void> {
  await assert.rejects(call, (error: unknown) => error instanceof DedupRpcError && error.code === GrpcStatus.UNAVAILABLE);
}

/** The server is down for `outageMs` while the client keeps calling; the first call's delay after the restart. */
async function firstSuccessAfterRestart(outageMs: number): Promise<number> {
  const first = await startDedupd();
  let second: Dedupd | undefined;
  // One attempt per call: each call says whether the server answered at that
  // moment, without the client's own retries.
  const client = new DedupClient({ address: first.address, maxAttempts: 1, deadlineMs: 1000 });
  try {
    assert.equal((await client.get({ namespace: 'reconnect', key: 'k' })).record, null);

    const exited = new Promise((resolve) => first.process.once('exit', resolve));
    first.process.kill('SIGKILL');
    await exited;
    const down = performance.now();
    let failed = 0;
    do {
      // The calls made while it is down fail at once.
      await expectUnavailable(client.get({ namespace: 'reconnect', key: 'k' }));
      failed++;
      await sleep(50);
    } while (performance.now() - down < outageMs);
    assert.ok(failed >= 2);

    // Same port and data dir (later flags win).
    second = await startDedupd({ args: [`--address=${first.address}`, `--data_dir=${first.dataDir}`] });
    const listening = performance.now(); // it printed its listening line just now
    while (performance.now() - listening < 15_000) {
      try {
        await client.get({ namespace: 'reconnect', key: 'k' });
        return performance.now() - listening;
      } catch (error) {
        assert.ok(error instanceof DedupRpcError && error.code === GrpcStatus.UNAVAILABLE, String(error));
        await sleep(20);
      }
    }
    throw new Error('no call got through in 15 s');
  } finally {
    client.close();
    await second?.stop();
    await first.stop(); // removes the data dir: after `second`
  }
}

for (const outageMs of [250, 3000]) {
  test(`the next call succeeds soon after a restart that followed a ${outageMs} ms outage`, async (t) => {
    const took = await firstSuccessAfterRestart(outageMs);
    t.diagnostic(`outage ${outageMs} ms: first success ${Math.round(took)} ms after the restart`);
    assert.ok(took < reconnectLimitMs, `the first call got through ${Math.round(took)} ms after the restart`);
  });
}
