// TLS settings and the bearer token (security.ts): what is read from where,
// what is refused, that the token never shows, and that it goes with every
// call: unary, batched, coalesced, a leader redirect. Against a real dedupd
// with real certificates: auth.integration.test.ts.
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { inspect } from 'node:util';

import { BearerToken, DedupClient, isLoopbackAddress, openChannel } from '../src/index.js';
import { channelSecurity, readPem, tlsChannel } from '../src/security.js';
import { FakeDedupd, notLeader } from './fake-dedupd.js';

const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const dir = mkdtempSync(join(tmpdir(), 'dedup-ts-sec-'));
const fakes: FakeDedupd[] = [];
after(() => {
  for (const f of fakes) f.stop();
  rmSync(dir, { recursive: true, force: true });
});

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

test('a PEM comes from a path or is given itself', () => {
  const path = file('ca.pem', PEM);
  assert.equal(readPem(path, 'rootCa')?.toString(), PEM);
  assert.equal(readPem(PEM, 'rootCa')?.toString(), PEM);
  assert.equal(readPem(Buffer.from(PEM), 'rootCa')?.toString(), PEM);
  assert.equal(readPem(undefined, 'rootCa'), null);
  assert.throws(() => readPem(join(dir, 'missing.pem'), 'tls.rootCa'), /tls.rootCa: cannot read ".*missing.pem": ENOENT/);
  assert.throws(() => readPem(file('junk', 'not a certificate'), 'tls.rootCa'), /no PEM block/);
  assert.throws(() => readPem(Buffer.from('not a certificate'), 'tls.rootCa'), /no PEM block/);
});

test('a client certificate needs its key; a missing CA file fails when the client is made', () => {
  assert.throws(() => tlsChannel({ clientCert: PEM }), /together/);
  assert.throws(() => tlsChannel({ clientKey: PEM }), /together/);
  assert.throws(() => tlsChannel({ serverName: '' }), /serverName/);
  assert.deepEqual(tlsChannel({ serverName: 'dedup.internal' }).options, { 'grpc.ssl_target_name_override': 'dedup.internal' });
  assert.throws(() => new DedupClient({ address: '127.0.0.1:1', tls: { rootCa: join(dir, 'nope.pem') } }), /tls.rootCa: cannot read/);
});

test('the token never shows', () => {
  const secret = 's3cr3t-token';
  const token = new BearerToken({ token: secret });
  assert.equal(token.value(), secret);
  for (const shown of [String(token), JSON.stringify({ token }), inspect(token), inspect({ token })]) {
    assert.ok(!shown.includes(secret), shown);
  }
  for (const bad of ['two words', 'tab\there', 'é-token']) {
    assert.throws(
      () => new BearerToken({ token: bad }),
      (error: unknown) => error instanceof TypeError && !error.message.includes(bad),
    );
  }
  assert.throws(() => new BearerToken({ token: '  ' }), /empty/);
  assert.throws(() => new BearerToken({}), TypeError);
  assert.throws(() => new DedupClient({ address: '127.0.0.1:1', token: 't', tokenFile: file('t', 't') }), /not both/);
});

test('a token file is read again when it changes', () => {
  const path = file('token', 'first-token\n');
  const token = new BearerToken({ file: path });
  assert.equal(token.value(), 'first-token');
  assert.ok(!inspect(token).includes('first-token'));
  assert.ok(inspect(token).includes(path));
  renameSync(file('token.new', 'second-token'), path);
  assert.equal(token.value(), 'second-token');
  unlinkSync(path);
  assert.throws(() => token.value(), /token file .*ENOENT/);
  assert.throws(() => new BearerToken({ file: path }), /token file/);
});

test('channels reconnect on a short backoff unless the caller sets their own', () => {
  const defaults = channelSecurity({}).options;
  assert.equal(defaults['grpc.initial_reconnect_backoff_ms'], 100);
  assert.equal(defaults['grpc.max_reconnect_backoff_ms'], 1000);
  const own = channelSecurity({ channelOptions: { 'grpc.max_reconnect_backoff_ms': 5000 }, tls: false }).options;
  assert.equal(own['grpc.initial_reconnect_backoff_ms'], 100);
  assert.equal(own['grpc.max_reconnect_backoff_ms'], 5000);
});

test('loopback addresses', () => {
  for (const a of ['127.0.0.1:50051', '127.0.0.3:1', 'localhost:1', '[::1]:50051', 'ipv4:127.0.0.1:5', 'dns:///localhost:5', 'unix:/tmp/d.sock']) {
    assert.ok(isLoopbackAddress(a), a);
  }
  for (const a of ['10.0.0.1:50051', 'dedup.example:443', '[2001:db8::1]:1', '0.0.0.0:1', 'dns:///dedup.example:5']) {
    assert.ok(!isLoopbackAddress(a), a);
  }
});

test('a token goes in plaintext only to loopback', () => {
  // Constructing a client opens no connection: no traffic leaves this machine.
  assert.throws(
    () => new DedupClient({ addresses: ['127.0.0.1:1', 'dedup.example:50051'], token: 't' }),
    /plaintext to dedup.example:50051/,
  );
  assert.throws(() => openChannel('dedup.example:50051', { token: 't' }), /plaintext/);
  new DedupClient({ address: 'dedup.example:50051', token: 't', allowInsecureToken: true }).close();
  new DedupClient({ address: 'dedup.example:50051', token: 't', tls: true }).close();
  new DedupClient({ address: 'dedup.example:50051' }).close(); // no token: plaintext as before
  assert.throws(() => new DedupClient({ address: '127.0.0.1:1', tls: true, credentials: tlsChannel(true).credentials }), /not both/);
});

test('the token goes with every call: unary, redirected, batched, coalesced', async () => {
  const leader = await FakeDedupd.start((method, request) => {
    const items = (request['items'] ?? []) as unknown[];
    if (method === 'BeginBatch') {
      return { response: { items: items.map(() => ({ response: { status: 'STARTED', fence: '1' } })) } };
    }
    return { response: {} };
  });
  fakes.push(leader);
  const follower = await FakeDedupd.start(() => notLeader(leader.address));
  fakes.push(follower);
  const tokenFile = file('call-token', 'file-token');
  const c = new DedupClient({ address: follower.address, tokenFile });
  try {
    await c.get({ namespace: 'ns', key: 'k' });
    await c.beginBatch([{ namespace: 'ns', key: 'k1', owner: 'o' }]);
  } finally {
    c.close();
  }
  const coalesced = new DedupClient({ address: leader.address, token: 'coalesced-token', coalesce: true });
  try {
    await Promise.all([coalesced.begin({ namespace: 'ns', key: 'a', owner: 'o' }), coalesced.begin({ namespace: 'ns', key: 'b', owner: 'o' })]);
  } finally {
    coalesced.close();
  }
  assert.deepEqual(follower.calls.map((call) => [call.method, call.authorization]), [['Get', 'Bearer file-token']]);
  assert.deepEqual(
    leader.calls.map((call) => [call.method, call.authorization]),
    [
      ['Get', 'Bearer file-token'],
      ['BeginBatch', 'Bearer file-token'],
      ['BeginBatch', 'Bearer coalesced-token'],
    ],
  );
  // None without a token, as before.
  const plain = new DedupClient({ address: leader.address });
  try {
    await plain.get({ namespace: 'ns', key: 'k' });
  } finally {
    plain.close();
  }
  assert.equal(leader.calls.at(-1)?.authorization, undefined);
});
