// TLS, mTLS and tenants end to end: DedupClient against a real dedupd with a
// tenants file written here (sha256 digests of tokens chosen here) and
// certificates made by openssl at test time (tests/testing/make-test-pki).
// Refusals are answers: UNAUTHENTICATED and PERMISSION_DENIED reject at once
// with their own code (no retry: no backoff sleep), batches refuse only the
// foreign item, and a failed TLS handshake is UNAVAILABLE.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import { type Client as GrpcClient, status as GrpcStatus } from '@grpc/grpc-js';

import { DedupClient, type DedupClientOptions, DedupRpcError, openChannel, type TlsOptions } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

// From <repo>/client/typescript/dist/test/ up to <repo>.
const MAKE_PKI = fileURLToPath(new URL('../../../../tests/testing/make-test-pki', import.meta.url));
const BILLING_TOKEN = 'billing-token-ts-81b2';
const OPS_TOKEN = 'ops-token-ts-4e0a';

let pkiDir = '';
let workDir = '';
const pki = (name: string): string => join(pkiDir, name);
const servers: Dedupd[] = [];
const clients: DedupClient[] = [];

before(() => {
  pkiDir = mkdtempSync(join(tmpdir(), 'dedup-ts-pki-'));
  workDir = mkdtempSync(join(tmpdir(), 'dedup-ts-auth-'));
  execFileSync(MAKE_PKI, [pkiDir], { stdio: ['ignore', 'ignore', 'pipe'] });
});
after(async () => {
  for (const c of clients) c.close();
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(pkiDir, { recursive: true, force: true });
  rmSync(workDir, { recursive: true, force: true });
});

const digest = (token: string): string => createHash('sha256').update(token).digest('hex');

function tenantsJson(withBillingToken = true): string {
  return JSON.stringify({
    tenants: [
      {
        name: 'billing',
        token_sha256: withBillingToken ? [digest(BILLING_TOKEN)] : [],
        cert_sans: ['billing-tools'],
        namespace_prefixes: ['billing:'],
        roles: ['client'],
      },
      { name: 'ops', token_sha256: [digest(OPS_TOKEN)], cert_sans: ['ops-console'], namespace_prefixes: [''], roles: ['operator'] },
    ],
  });
}

/** Written aside and renamed: a reader never sees half a file. */
function writeFile(path: string, text: string): void {
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
}

let files = 0;
/** A dedupd with its own tenants file (returned for rewriting). */
async function start(mode: 'plaintext' | 'tls' | 'mtls' = 'plaintext'): Promise<{ server: Dedupd; tenantsFile: string }> {
  const tenantsFile = join(workDir, `tenants-${files++}.json`);
  writeFile(tenantsFile, tenantsJson());
  const args = [`--tenants_file=${tenantsFile}`];
  if (mode !== 'plaintext') args.push(`--tls_cert_file=${pki('server.pem')}`, `--tls_key_file=${pki('server.key')}`);
  if (mode === 'mtls') args.push(`--tls_client_ca_file=${pki('ca.pem')}`);
  const server = await startDedupd({ args });
  servers.push(server);
  return { server, tenantsFile };
}

/** A client whose backoff sleeps are recorded (a refusal must cause none) and short. */
function client(server: Dedupd, options: Partial<DedupClientOptions> = {}): { c: DedupClient; sleeps: number[] } {
  const sleeps: number[] = [];
  const c = new DedupClient({
    address: server.address,
    maxAttempts: 3,
    backoff: { baseMs: 10, capMs: 20 },
    sleep: (ms) => {
      sleeps.push(ms);
      return new Promise((resolve) => setTimeout(resolve, ms));
    },
    // Each client its own connection: a handshake test must not reuse another's.
    channelOptions: { 'grpc.use_local_subchannel_pool': 1 },
    ...options,
  });
  clients.push(c);
  return { c, sleeps };
}

function rejectsWith(code: number, detail?: RegExp): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof DedupRpcError, String(error));
    assert.equal(error.codeName, GrpcStatus[code], error.message);
    if (detail !== undefined) assert.match(error.details, detail);
    return true;
  };
}

/** dedup.v1.Admin/Stats (StatsRequest is empty); resolves with the raw answer. */
function stats(channel: GrpcClient): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    channel.makeUnaryRequest(
      '/dedup.v1.Admin/Stats',
      () => Buffer.alloc(0),
      (data: Buffer) => data,
      {},
      { deadline: Date.now() + 5000 },
      (error, response) => (error ? reject(error) : resolve(response as Buffer)),
    );
  }).finally(() => channel.close()) as Promise<Buffer>;
}

const hash = Buffer.alloc(32, 3);
const begin = (namespace: string, key: string, owner = 'o') => ({ namespace, key, argsHash: hash, owner });

test('no credential or a wrong token: UNAUTHENTICATED at once, batches and coalesced calls too', async () => {
  const { server } = await start();
  const { c: nobody, sleeps } = client(server);
  await assert.rejects(nobody.begin(begin('billing:inv', 'k')), rejectsWith(GrpcStatus.UNAUTHENTICATED, /no credential/));
  const { c: wrong, sleeps: wrongSleeps } = client(server, { token: 'not-a-token' });
  await assert.rejects(wrong.begin(begin('billing:inv', 'k')), rejectsWith(GrpcStatus.UNAUTHENTICATED, /not known/));
  await assert.rejects(wrong.beginBatch([begin('billing:inv', 'k')]), rejectsWith(GrpcStatus.UNAUTHENTICATED));
  const { c: coalesced, sleeps: coalescedSleeps } = client(server, { token: 'not-a-token', coalesce: true });
  await assert.rejects(coalesced.begin(begin('billing:inv', 'k')), (error: unknown) => {
    rejectsWith(GrpcStatus.UNAUTHENTICATED)(error);
    assert.equal((error as DedupRpcError).method, 'Begin');
    return true;
  });
  assert.deepEqual([sleeps, wrongSleeps, coalescedSleeps], [[], [], []], 'a refusal was retried');
});

test("a tenant works in its own namespaces (token or token file); another tenant's is refused alike for existing and missing keys", async () => {
  const { server } = await start();
  const tokenFile = join(workDir, 'billing.token');
  writeFile(tokenFile, `${BILLING_TOKEN}\n`);
  const { c: ops } = client(server, { token: OPS_TOKEN });
  for (const [i, options] of [{ token: BILLING_TOKEN }, { tokenFile }].entries()) {
    const { c: billing } = client(server, options);
    const begun = await billing.begin(begin('billing:inv', `k${i}`));
    assert.equal(begun.status, 'STARTED');
    const done = await billing.complete({ namespace: 'billing:inv', key: `k${i}`, fence: begun.fence, outcome: 'SUCCESS', result: 'sent' });
    assert.equal(done.status, 'OK');
    assert.equal((await billing.get({ namespace: 'billing:inv', key: `k${i}` })).record?.result.toString(), 'sent');
  }

  const { c: billing, sleeps } = client(server, { token: BILLING_TOKEN });
  await ops.begin(begin('ops:jobs', 'exists'));
  const refusal = async (key: string): Promise<DedupRpcError> => {
    const error = await billing.get({ namespace: 'ops:jobs', key }).then(
      () => assert.fail('not refused'),
      (e: unknown) => e,
    );
    rejectsWith(GrpcStatus.PERMISSION_DENIED, /billing:/)(error);
    return error as DedupRpcError;
  };
  const existing = await refusal('exists');
  const missing = await refusal('missing');
  assert.equal(existing.details, missing.details, 'the refusal must not tell whether the key exists');
  await assert.rejects(billing.begin(begin('ops:jobs', 'exists')), rejectsWith(GrpcStatus.PERMISSION_DENIED));
  await assert.rejects(
    billing.complete({ namespace: 'ops:jobs', key: 'exists', fence: 1n, outcome: 'SUCCESS' }),
    rejectsWith(GrpcStatus.PERMISSION_DENIED),
  );
  // A prefix is a prefix of the namespace, not of the key.
  await assert.rejects(billing.begin(begin('billing', 'k')), rejectsWith(GrpcStatus.PERMISSION_DENIED));
  assert.deepEqual(sleeps, []);
  assert.equal((await ops.get({ namespace: 'ops:jobs', key: 'exists' })).record?.state, 'IN_FLIGHT');
});

test('batches refuse only the foreign item, direct and coalesced', async () => {
  const { server } = await start();
  const { c: billing, sleeps } = client(server, { token: BILLING_TOKEN });
  const namespaces = ['billing:a', 'ops:b', 'billing:c'];
  const begun = await billing.beginBatch(namespaces.map((ns) => begin(ns, 'k')));
  assert.deepEqual(
    begun.map((r) => (r.ok ? r.answer.status : r.code)),
    ['STARTED', GrpcStatus.PERMISSION_DENIED, 'STARTED'],
  );
  const refused = begun[1];
  assert.ok(refused !== undefined && !refused.ok);
  assert.match(refused.message, /^items\[1\]\.namespace:/);
  const fence = (i: number): bigint => {
    const r = begun[i];
    assert.ok(r?.ok);
    return r.answer.fence;
  };
  const completed = await billing.completeBatch([
    { namespace: 'billing:a', key: 'k', fence: fence(0), outcome: 'SUCCESS', result: 'done' },
    { namespace: 'ops:b', key: 'k', fence: 1n, outcome: 'SUCCESS' },
    { namespace: 'billing:c', key: 'k', fence: fence(2), outcome: 'SUCCESS', result: 'done' },
  ]);
  assert.deepEqual(
    completed.map((r) => (r.ok ? r.answer.status : r.code)),
    ['OK', GrpcStatus.PERMISSION_DENIED, 'OK'],
  );

  // Coalesced: the three calls of one turn share a batch; each caller gets
  // what its unary call would have (without the "items[i]." prefix).
  const { c: coalesced, sleeps: coalescedSleeps } = client(server, { token: BILLING_TOKEN, coalesce: true });
  const settled = await Promise.allSettled(namespaces.map((ns) => coalesced.begin(begin(ns, 'coalesced'))));
  assert.deepEqual(
    settled.map((s) => s.status),
    ['fulfilled', 'rejected', 'fulfilled'],
  );
  const denied = settled[1];
  assert.ok(denied?.status === 'rejected');
  rejectsWith(GrpcStatus.PERMISSION_DENIED, /^namespace:/)(denied.reason);
  assert.deepEqual([sleeps, coalescedSleeps], [[], []], 'a refused item was retried');
});

test('Forget and Admin need the operator role', async () => {
  const { server } = await start();
  const { c: billing } = client(server, { token: BILLING_TOKEN });
  const { c: ops } = client(server, { token: OPS_TOKEN });
  await billing.begin(begin('billing:x', 'k'));
  await assert.rejects(billing.forget({ namespace: 'billing:x', key: 'k' }), rejectsWith(GrpcStatus.PERMISSION_DENIED, /operator/));
  await assert.rejects(stats(openChannel(server.address, { token: BILLING_TOKEN })), { code: GrpcStatus.PERMISSION_DENIED });
  await assert.rejects(stats(openChannel(server.address)), { code: GrpcStatus.UNAUTHENTICATED });
  assert.equal((await ops.forget({ namespace: 'billing:x', key: 'k' })).existed, true);
  assert.ok(Buffer.isBuffer(await stats(openChannel(server.address, { token: OPS_TOKEN }))));
  assert.equal((await ops.get({ namespace: 'billing:x', key: 'k' })).record, null);
});

test('a reload (SIGHUP) revokes a token', async () => {
  const { server, tenantsFile } = await start();
  const { c: billing } = client(server, { token: BILLING_TOKEN });
  const { c: ops } = client(server, { token: OPS_TOKEN });
  assert.equal((await billing.begin(begin('billing:x', 'k'))).status, 'STARTED');
  writeFile(tenantsFile, tenantsJson(false));
  server.process.kill('SIGHUP');
  const deadline = Date.now() + 15_000;
  let code: number | undefined;
  while (Date.now() < deadline) {
    code = await billing.get({ namespace: 'billing:x', key: 'k' }).then(
      () => GrpcStatus.OK,
      (e: unknown) => (e instanceof DedupRpcError ? e.code : undefined),
    );
    if (code === GrpcStatus.UNAUTHENTICATED) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.equal(code, GrpcStatus.UNAUTHENTICATED);
  assert.notEqual((await ops.get({ namespace: 'billing:x', key: 'k' })).record, null, 'the other tenant is untouched');
});

test('TLS: a client trusting the server CA works; another CA, a wrong server name or plaintext fail fast (UNAVAILABLE)', async () => {
  const { server } = await start('tls');
  const caPem = readFileSync(pki('ca.pem'));
  const good: TlsOptions[] = [{ rootCa: pki('ca.pem') }, { rootCa: caPem }, { rootCa: caPem.toString(), serverName: 'localhost' }];
  for (const tls of good) {
    const { c } = client(server, { tls, token: BILLING_TOKEN });
    assert.equal((await c.get({ namespace: 'billing:x', key: 'k' })).record, null);
  }
  const { c: coalesced } = client(server, { tls: { rootCa: caPem }, token: BILLING_TOKEN, coalesce: true });
  assert.equal((await coalesced.begin(begin('billing:x', 'k'))).status, 'STARTED');

  const bad: Partial<DedupClientOptions>[] = [
    { tls: { rootCa: pki('ca2.pem') } },
    { tls: { rootCa: pki('ca.pem'), serverName: 'wrong.example' } },
    {},
  ];
  for (const options of bad) {
    const { c } = client(server, { token: BILLING_TOKEN, maxAttempts: 2, deadlineMs: 3000, ...options });
    const started = Date.now();
    await assert.rejects(c.get({ namespace: 'billing:x', key: 'k' }), rejectsWith(GrpcStatus.UNAVAILABLE));
    assert.ok(Date.now() - started < 5000, `${JSON.stringify(options)} took ${Date.now() - started} ms`);
  }
});

test('mTLS: client certificates identify tenants', async () => {
  const { server } = await start('mtls');
  const cert = (name: string): TlsOptions => ({ rootCa: pki('ca.pem'), clientCert: pki(`${name}.pem`), clientKey: pki(`${name}.key`) });
  const { c: billing, sleeps } = client(server, { tls: cert('client-billing') });
  assert.equal((await billing.begin(begin('billing:x', 'k'))).status, 'STARTED');
  await assert.rejects(billing.begin(begin('ops:x', 'k')), rejectsWith(GrpcStatus.PERMISSION_DENIED));
  await assert.rejects(billing.forget({ namespace: 'billing:x', key: 'k' }), rejectsWith(GrpcStatus.PERMISSION_DENIED));
  const batch = await billing.beginBatch([begin('billing:y', 'batch'), begin('ops:y', 'batch')]);
  assert.deepEqual(
    batch.map((r) => (r.ok ? r.answer.status : r.code)),
    ['STARTED', GrpcStatus.PERMISSION_DENIED],
  );

  const { c: ops } = client(server, { tls: cert('client-ops') });
  assert.equal((await ops.forget({ namespace: 'billing:x', key: 'k' })).existed, true);
  assert.ok(Buffer.isBuffer(await stats(openChannel(server.address, { tls: cert('client-ops') }))));
  await assert.rejects(stats(openChannel(server.address, { tls: cert('client-billing') })), { code: GrpcStatus.PERMISSION_DENIED });

  // A valid certificate whose names are in no tenant.
  const { c: stranger, sleeps: strangerSleeps } = client(server, { tls: cert('client-stranger') });
  await assert.rejects(stranger.begin(begin('billing:x', 'k')), rejectsWith(GrpcStatus.UNAUTHENTICATED, /stranger/));
  // A certificate from another CA claiming billing's name: no handshake.
  const { c: rogue } = client(server, { tls: cert('client-rogue'), maxAttempts: 2, deadlineMs: 3000 });
  await assert.rejects(rogue.get({ namespace: 'billing:x', key: 'k' }), rejectsWith(GrpcStatus.UNAVAILABLE));
  // No certificate: a token still works; a wrong one beside a good certificate is refused.
  const { c: tokenOnly } = client(server, { tls: { rootCa: pki('ca.pem') }, token: BILLING_TOKEN });
  assert.equal((await tokenOnly.get({ namespace: 'billing:x', key: 'k' })).record, null);
  const { c: wrong } = client(server, { tls: cert('client-billing'), token: 'wrong' });
  await assert.rejects(wrong.get({ namespace: 'billing:x', key: 'k' }), rejectsWith(GrpcStatus.UNAUTHENTICATED));
  assert.deepEqual([sleeps, strangerSleeps], [[], []]);
});
