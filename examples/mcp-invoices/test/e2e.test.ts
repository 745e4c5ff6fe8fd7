// End to end: MCP client (the SDK's) → stdio → mcp-invoices server process →
// gRPC → a real dedupd. The ledger file shows how often an invoice was really
// sent.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { after, afterEach, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { DedupClient } from '@dedup/client';
import { type Dedupd, startDedupd } from '@dedup/client/testing';

import { appendToLedger, FenceRefusedError } from '../src/ledger.js';
import { type InvoiceServer, Ledger, startInvoiceServer } from './harness.js';

let dedupd: Dedupd;
let dedup: DedupClient;
const started: InvoiceServer[] = [];
const ledgers: Ledger[] = [];

before(async () => {
  // Short leases are allowed so the takeover test (d) takes about a second.
  dedupd = await startDedupd({ args: ['--min_lease_ms=100'] });
  dedup = new DedupClient({ address: dedupd.address });
});
afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.close()));
  for (const l of ledgers.splice(0)) l.remove();
});
after(async () => {
  dedup.close();
  await dedupd.stop();
});

/** A ledger and a function starting servers that share it (and a fresh client id, so tests never share keys). */
function setup(): { ledger: Ledger; clientId: string; server: (env?: Record<string, string>) => Promise<InvoiceServer> } {
  const ledger = new Ledger();
  ledgers.push(ledger);
  const clientId = `e2e-${randomUUID().slice(0, 8)}`;
  const server = async (env: Record<string, string> = {}): Promise<InvoiceServer> => {
    const s = await startInvoiceServer({ DEDUP_ADDRESS: dedupd.address, DEDUP_CLIENT_ID: clientId, LEDGER_FILE: ledger.path, ...env });
    started.push(s);
    return s;
  };
  return { ledger, clientId, server };
}

const invoice = { customer: 'ana@example.com', amount: 129.99, currency: 'EUR' };

test('(a) the same call twice sends once; the second says duplicate: true', async () => {
  const { ledger, server } = setup();
  const s = await server();
  const args = { ...invoice, idempotencyKey: 'inv-981' };
  const first = await s.callSendInvoice(args);
  const second = await s.callSendInvoice(args);
  assert.equal(first.isError, false, first.text);
  assert.equal(first.payload['duplicate'], false);
  assert.equal(second.payload['duplicate'], true);
  assert.equal(second.payload['invoiceId'], first.payload['invoiceId']);
  const lines = ledger.lines();
  assert.equal(lines.length, 1);
  assert.equal(lines[0]?.['invoiceId'], first.payload['invoiceId']);
});

test('(a) without idempotencyKey the key is derived from the arguments', async () => {
  const { ledger, server } = setup();
  const s = await server();
  const first = await s.callSendInvoice(invoice);
  const reordered = await s.callSendInvoice({ currency: 'EUR', amount: 129.99, customer: 'ana@example.com' });
  const other = await s.callSendInvoice({ ...invoice, amount: 5 });
  assert.deepEqual([first.payload['duplicate'], reordered.payload['duplicate'], other.payload['duplicate']], [false, true, false]);
  assert.equal(ledger.lines().length, 2);
});

test('(b) two server processes called concurrently with one key: exactly one ledger line', async () => {
  const { ledger, server } = setup();
  // The pause makes the calls overlap for certain: one claims, the other waits.
  const [s1, s2] = await Promise.all([server({ SEND_DELAY_MS: '300' }), server({ SEND_DELAY_MS: '300' })]);
  const args = { ...invoice, idempotencyKey: 'inv-concurrent' };
  const answers = await Promise.all([s1.callSendInvoice(args), s2.callSendInvoice(args)]);
  assert.deepEqual(answers.map((a) => a.isError), [false, false]);
  assert.deepEqual(answers.map((a) => a.payload['duplicate']).sort(), [false, true]);
  assert.equal(answers[0]?.payload['invoiceId'], answers[1]?.payload['invoiceId']);
  assert.equal(ledger.lines().length, 1);
});

test('(c) same key, different amount: a tool error saying conflict; ledger unchanged', async () => {
  const { ledger, server } = setup();
  const s = await server();
  await s.callSendInvoice({ ...invoice, idempotencyKey: 'inv-42' });
  const before = ledger.lines();
  const clash = await s.callSendInvoice({ ...invoice, amount: 1000, idempotencyKey: 'inv-42' });
  assert.equal(clash.isError, true);
  assert.match(clash.text, /conflict/i);
  assert.deepEqual(ledger.lines(), before);
  assert.equal(before.length, 1);
});

test('(d) a server killed between Begin and Complete: the retry waits out the lease, takes over, sends once', async () => {
  const { ledger, clientId, server } = setup();
  const key = 'inv-crash';
  const victim = await server({ DEDUP_LEASE_MS: '1000', SEND_DELAY_MS: '60000' });
  const survivor = await server({ DEDUP_LEASE_MS: '1000' });
  const doomed = victim.callSendInvoice({ ...invoice, idempotencyKey: key }).catch((error: unknown) => error);

  // Wait until the victim holds the claim (Begin done, Complete not yet).
  const namespace = `${clientId}:send_invoice`;
  let claim = (await dedup.get({ namespace, key })).record;
  for (let i = 0; claim === null && i < 100; i++) {
    await sleep(20);
    claim = (await dedup.get({ namespace, key })).record;
  }
  assert.equal(claim?.state, 'IN_FLIGHT');
  process.kill(victim.pid, 'SIGKILL');
  assert.ok((await doomed) instanceof Error, 'the killed server cannot answer');

  const retry = await survivor.callSendInvoice({ ...invoice, idempotencyKey: key });
  assert.equal(retry.isError, false, retry.text);
  assert.deepEqual([retry.payload['duplicate'], retry.payload['takeover']], [false, true]);
  assert.ok(Date.now() >= (claim?.leaseExpiresAt ?? Infinity), 'took over only after the dead owner\'s lease ran out');
  const lines = ledger.lines();
  assert.equal(lines.length, 1);
  assert.equal(lines[0]?.['fence'], String((claim?.fence ?? 0n) + 1n));
  const record = (await dedup.get({ namespace, key })).record;
  assert.deepEqual([record?.state, record?.attempts], ['COMPLETED', 2]);

  const again = await survivor.callSendInvoice({ ...invoice, idempotencyKey: key });
  assert.equal(again.payload['duplicate'], true);
  assert.equal(ledger.lines().length, 1);
});

test('(e) a non-retryable failure is stored: the retry returns the same error without sending', async () => {
  const { ledger, server } = setup();
  const [s1, s2] = await Promise.all([server(), server()]);
  const args = { ...invoice, amount: -5, idempotencyKey: 'inv-negative' };
  const first = await s1.callSendInvoice(args);
  const retry = await s2.callSendInvoice(args);
  assert.equal(first.isError, true);
  assert.equal(retry.isError, true);
  assert.deepEqual(first.payload, { error: 'invalid amount', code: 'INVALID_AMOUNT', duplicate: false });
  assert.deepEqual(retry.payload, { error: 'invalid amount', code: 'INVALID_AMOUNT', duplicate: true });
  assert.equal(ledger.lines().length, 0);
});

test('(f) a send that outlives its lease (its process frozen): the takeover sends, the late first send is refused by its fence', async () => {
  const { ledger, clientId, server } = setup();
  const key = 'inv-frozen';
  const namespace = `${clientId}:send_invoice`;
  const sendDelayMs = 1500;
  const first = await server({ DEDUP_LEASE_MS: '600', SEND_DELAY_MS: String(sendDelayMs) });
  const second = await server({ DEDUP_LEASE_MS: '600' });
  const late = first.callSendInvoice({ ...invoice, idempotencyKey: key });

  // Wait until the first server holds the claim, then freeze it before it
  // writes: no renewals, so its lease lapses (a GC pause, a stalled VM).
  // Wherever the freeze lands in its slow send, the send has passed the
  // signal check (or has yet to reach it, before the refused renewal that
  // would abort it is answered) and goes on with the old fence.
  let claim = (await dedup.get({ namespace, key })).record;
  for (let i = 0; claim === null && i < 100; i++) {
    await sleep(20);
    claim = (await dedup.get({ namespace, key })).record;
  }
  const claimSeenAt = performance.now();
  assert.equal(claim?.state, 'IN_FLIGHT');
  process.kill(first.pid, 'SIGSTOP');
  let retry;
  try {
    retry = await second.callSendInvoice({ ...invoice, idempotencyKey: key });
    assert.ok(performance.now() - claimSeenAt < sendDelayMs, 'the takeover came before the first server\'s send was due');
  } finally {
    process.kill(first.pid, 'SIGCONT');
  }
  assert.equal(retry.isError, false, retry.text);
  assert.deepEqual([retry.payload['duplicate'], retry.payload['takeover']], [false, true]);

  const refused = await late;
  assert.equal(refused.isError, true);
  assert.equal(refused.payload['code'], 'SUPERSEDED', refused.text);
  const lines = ledger.lines();
  assert.equal(lines.length, 1, 'sent once');
  assert.deepEqual([lines[0]?.['invoiceId'], lines[0]?.['fence']], [retry.payload['invoiceId'], String((claim?.fence ?? 0n) + 1n)]);
  const record = (await dedup.get({ namespace, key })).record;
  assert.deepEqual([record?.state, record?.attempts, record?.fence], ['COMPLETED', 2, (claim?.fence ?? 0n) + 1n]);
  const again = await first.callSendInvoice({ ...invoice, idempotencyKey: key });
  assert.deepEqual([again.payload['duplicate'], again.payload['invoiceId']], [true, retry.payload['invoiceId']]);
});

test('the ledger refuses a lower fence for a key, accepts an equal or higher one, and keys apart', async () => {
  const ledger = new Ledger();
  ledgers.push(ledger);
  const entry = { invoiceId: 'inv-1', customer: 'c', amount: 1, currency: 'EUR', key: 'k' };
  await appendToLedger(ledger.path, { ...entry, fence: '7' });
  await assert.rejects(appendToLedger(ledger.path, { ...entry, invoiceId: 'inv-2', fence: '6' }), (error: unknown) => {
    assert.ok(error instanceof FenceRefusedError);
    assert.deepEqual([error.fence, error.highestFence, error.code], [6n, 7n, 'FENCE_REFUSED']);
    return true;
  });
  await appendToLedger(ledger.path, { ...entry, invoiceId: 'inv-3', fence: '7' });
  await appendToLedger(ledger.path, { ...entry, invoiceId: 'inv-4', fence: '8' });
  await appendToLedger(ledger.path, { ...entry, invoiceId: 'inv-5', key: 'other', fence: '1' });
  // Fences compare as numbers, past 2^53 too.
  await appendToLedger(ledger.path, { ...entry, invoiceId: 'inv-6', key: 'big', fence: '9007199254740993' });
  await assert.rejects(appendToLedger(ledger.path, { ...entry, key: 'big', fence: '9007199254740992' }), FenceRefusedError);
  assert.deepEqual(ledger.lines().map((l) => l['invoiceId']), ['inv-1', 'inv-3', 'inv-4', 'inv-5', 'inv-6']);

  // Racing writers (the check and the append are one step): the accepted
  // fences of a key never go down in the file.
  const fences = Array.from({ length: 30 }, (_, i) => ((i * 17) % 30) + 1);
  await Promise.allSettled(fences.map((f) => appendToLedger(ledger.path, { ...entry, key: 'race', fence: String(f) })));
  const accepted = ledger.lines().filter((l) => l['key'] === 'race').map((l) => Number(l['fence']));
  assert.ok(accepted.length >= 2, `${accepted.length} accepted`);
  assert.deepEqual(accepted, [...accepted].sort((a, b) => a - b));
});

test('the tool advertises its annotations and schema', async () => {
  const { server } = setup();
  const s = await server();
  const { tools } = await s.client.listTools();
  const tool = tools.find((t) => t.name === 'send_invoice');
  assert.ok(tool);
  assert.equal(tool.annotations?.readOnlyHint, false);
  assert.equal(tool.annotations?.idempotentHint, true);
  assert.deepEqual(Object.keys(tool.inputSchema.properties ?? {}).sort(), ['amount', 'currency', 'customer', 'idempotencyKey']);
  assert.deepEqual([...(tool.inputSchema.required ?? [])].sort(), ['amount', 'currency', 'customer']);
});
