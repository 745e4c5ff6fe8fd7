// The DEDUP_* environment variables (environment.ts) against a real dedupd
// with TLS, client certificates and tenants: DEDUP_ADDRESS as a list whose
// first node is down, DEDUP_CA_FILE, DEDUP_CERT_FILE / DEDUP_KEY_FILE (mTLS),
// DEDUP_TOKEN_FILE; explicit options win over each of them.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, afterEach, before, test } from 'node:test';

import { DedupClient, DedupRpcError, environmentDefaults } from '../src/index.js';
import { type Dedupd, startDedupd } from '../src/testing/dedupd.js';

const MAKE_PKI = fileURLToPath(new URL('../../../../tests/testing/make-test-pki', import.meta.url));
const BILLING_TOKEN = 'billing-token-ts-env-5d1c';
const VARIABLES = ['DEDUP_ADDRESS', 'DEDUP_TOKEN_FILE', 'DEDUP_CA_FILE', 'DEDUP_CERT_FILE', 'DEDUP_KEY_FILE'];

let dir = '';
let server: Dedupd;
let tokenFile = '';
const pki = (name: string): string => join(dir, name);
const clients: DedupClient[] = [];
const digest = (token: string): string => createHash('sha256').update(token).digest('hex');

function setEnv(values: Record<string, string>): void {
  for (const name of VARIABLES) delete process.env[name];
  Object.assign(process.env, values);
}

function make(options: ConstructorParameters<typeof DedupClient>[0] = {}): DedupClient {
  const c = new DedupClient({ channelOptions: { 'grpc.use_local_subchannel_pool': 1 }, ...options });
  clients.push(c);
  return c;
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'dedup-ts-env-'));
  execFileSync(MAKE_PKI, [dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  const tenants = pki('tenants.json');
  writeFileSync(
    tenants,
    JSON.stringify({
      tenants: [
        { name: 'billing', token_sha256: [digest(BILLING_TOKEN)], namespace_prefixes: ['billing:'], roles: ['client'] },
        { name: 'ops', cert_sans: ['ops-console'], namespace_prefixes: [''], roles: ['operator'] },
      ],
    }),
  );
  tokenFile = pki('billing.token');
  writeFileSync(tokenFile, `${BILLING_TOKEN}\n`);
  server = await startDedupd({
    args: [`--tenants_file=${tenants}`, `--tls_cert_file=${pki('server.pem')}`, `--tls_key_file=${pki('server.key')}`, `--tls_client_ca_file=${pki('ca.pem')}`],
  });
});
afterEach(() => setEnv({}));
after(async () => {
  for (const c of clients) c.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const hash = Buffer.alloc(32, 5);

test('address list, CA file and token file from the environment', async () => {
  setEnv({ DEDUP_ADDRESS: `127.0.0.1:1, ${server.address}`, DEDUP_CA_FILE: pki('ca.pem'), DEDUP_TOKEN_FILE: tokenFile });
  const c = make();
  const begun = await c.begin({ namespace: 'billing:env', key: 'k1', argsHash: hash, owner: 'o' });
  assert.equal(begun.status, 'STARTED');
});

test('client certificate from the environment (mTLS): the ops tenant', async () => {
  setEnv({ DEDUP_ADDRESS: server.address, DEDUP_CA_FILE: pki('ca.pem'), DEDUP_CERT_FILE: pki('client-ops.pem'), DEDUP_KEY_FILE: pki('client-ops.key') });
  const got = await make().get({ namespace: 'shipping:env', key: 'k' });
  assert.equal(got.record, null);
});

test('explicit options win over the environment', async () => {
  setEnv({ DEDUP_ADDRESS: '127.0.0.1:1', DEDUP_CA_FILE: pki('ca.pem'), DEDUP_TOKEN_FILE: tokenFile });
  const wrong = make({ address: server.address, token: 'not-a-token', maxAttempts: 1 });
  await assert.rejects(wrong.get({ namespace: 'billing:env', key: 'k' }), (e: unknown) => {
    assert.ok(e instanceof DedupRpcError, String(e));
    assert.equal(e.codeName, 'UNAUTHENTICATED');
    return true;
  });
  const plain = make({ address: server.address, tls: false, maxAttempts: 1, deadlineMs: 1000 });
  await assert.rejects(plain.get({ namespace: 'billing:env', key: 'k' }), (e: unknown) => {
    assert.ok(e instanceof DedupRpcError, String(e));
    assert.equal(e.codeName, 'UNAVAILABLE');
    return true;
  });
  assert.deepEqual(environmentDefaults({ addresses: ['a:1'], tokenFile: 'f' }), { addresses: ['a:1'], tokenFile: 'f', tls: { rootCa: pki('ca.pem') } });
});

test('no address and no DEDUP_ADDRESS: a TypeError naming both', () => {
  setEnv({});
  assert.throws(() => make(), /address/);
});
