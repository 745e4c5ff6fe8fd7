// Tenant limits end to end: a real dedupd whose tenants file limits the
// tenant "slow" to 5 requests per second refuses the excess with
// RESOURCE_EXHAUSTED and a RetryInfo; DedupClient waits the delay the server
// gives and tries again (an attempt like any other), and with no attempt
// left the refusal reaches the caller with the server's message. (The token
// goes over plaintext to loopback: TLS is auth.integration.test.ts's subject.)
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { DedupClient, type DedupClientOptions, DedupRpcError } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

const SLOW_TOKEN = 'slow-token-ts-9d41';

let workDir = '';
const servers: Dedupd[] = [];
const clients: DedupClient[] = [];

before(() => {
  workDir = mkdtempSync(join(tmpdir(), 'dedup-ts-limits-'));
});
after(async () => {
  for (const c of clients) c.close();
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(workDir, { recursive: true, force: true });
});

let files = 0;
/** A fresh dedupd (a full token bucket) whose one tenant may make 5 requests per second. */
async function start(): Promise<Dedupd> {
  const tenantsFile = join(workDir, `tenants-${files++}.json`);
  const digest = createHash('sha256').update(SLOW_TOKEN).digest('hex');
  writeFileSync(
    tenantsFile,
    JSON.stringify({
      tenants: [
        { name: 'slow', token_sha256: [digest], namespace_prefixes: ['slow:'], roles: ['client'], limits: { rps: 5, inflight: 2 } },
      ],
    }),
  );
  const server = await startDedupd({ args: [`--tenants_file=${tenantsFile}`] });
  servers.push(server);
  return server;
}

/** A client whose sleeps are recorded (and slept). */
function client(server: Dedupd, options: Partial<DedupClientOptions>): { c: DedupClient; sleeps: number[] } {
  const sleeps: number[] = [];
  const c = new DedupClient({
    address: server.address,
    token: SLOW_TOKEN,
    sleep: (ms) => {
      sleeps.push(ms);
      return new Promise((resolve) => setTimeout(resolve, ms));
    },
    ...options,
  });
  clients.push(c);
  return { c, sleeps };
}

test('with two attempts every call waits out the limit and succeeds', async () => {
  const { c, sleeps } = client(await start(), { maxAttempts: 2 });
  const startedAt = Date.now();
  for (let i = 0; i < 15; i++) {
    const answer = await c.begin({ namespace: 'slow:x', key: `k${i}`, argsHash: Buffer.from('args'), owner: `o${i}` });
    assert.equal(answer.status, 'STARTED');
  }
  // 15 calls at 5 per second, after a burst of at most 5: about 2 s.
  assert.ok(Date.now() - startedAt >= 1500, `took ${Date.now() - startedAt} ms`);
  assert.ok(sleeps.length > 0, 'the server never asked the client to wait');
  assert.ok(
    sleeps.every((ms) => ms > 0 && ms <= 1000),
    `server delays ${sleeps.join(', ')}`,
  );
});

test('with one attempt the refusal reaches the caller with its message', async () => {
  const { c, sleeps } = client(await start(), { maxAttempts: 1 });
  let refusal: unknown;
  for (let i = 0; i < 20 && refusal === undefined; i++) {
    await c.begin({ namespace: 'slow:x', key: `j${i}`, owner: `o${i}` }).catch((error: unknown) => {
      refusal = error;
    });
  }
  assert.ok(refusal instanceof DedupRpcError, `20 calls at once were never refused: ${String(refusal)}`);
  assert.equal(refusal.code, GrpcStatus.RESOURCE_EXHAUSTED);
  assert.match(refusal.details, /requests per second/);
  assert.ok(refusal.retryDelayMs !== undefined && refusal.retryDelayMs > 0 && refusal.retryDelayMs <= 1000);
  assert.deepEqual(sleeps, []);
});

test('coalesced calls: a refused batch waits and goes again whole', async () => {
  const { c, sleeps } = client(await start(), { maxAttempts: 2, coalesce: true });
  for (let i = 0; i < 10; i++) {
    const answer = await c.begin({ namespace: 'slow:x', key: `c${i}`, owner: `o${i}` });
    assert.equal(answer.status, 'STARTED');
  }
  assert.ok(sleeps.length > 0, 'the server never asked the client to wait');
});
