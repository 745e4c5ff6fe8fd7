// The hand-written wire mapping must cover dedup.proto exactly, so a field
// added to the contract fails here instead of being silently dropped.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DedupProtocolError } from '../src/index.js';
import * as wire from '../src/wire.js';

interface MessageType {
  readonly name?: string;
  readonly field?: ReadonlyArray<{ readonly name: string }>;
  readonly nestedType?: readonly MessageType[];
}
interface DescriptorMessage {
  readonly type?: MessageType;
}

// proto-loader lists top-level messages only; a nested one such as
// "dedup.v1.BeginBatchResponse.Item" is found inside its parent's descriptor.
function messageType(name: string): MessageType | undefined {
  const definition = wire.packageDefinition();
  const top = (definition[name] as DescriptorMessage | undefined)?.type;
  if (top !== undefined) return top;
  const dot = name.lastIndexOf('.');
  return messageType(name.slice(0, dot))?.nestedType?.find((t) => t.name === name.slice(dot + 1));
}

test('WIRE_FIELDS name every field of every mapped message', () => {
  for (const [message, fields] of Object.entries(wire.WIRE_FIELDS)) {
    const type = messageType(message);
    assert.ok(type?.field, `${message} is not in dedup.proto`);
    const protoFields = type.field.map((f) => f.name).sort();
    assert.deepEqual([...fields].sort(), protoFields, message);
  }
});

test('every dedup.v1 message is mapped', () => {
  const definition = wire.packageDefinition();
  const nested = (prefix: string, t: MessageType): string[] =>
    (t.nestedType ?? []).flatMap((n) => [`${prefix}.${n.name ?? ''}`, ...nested(`${prefix}.${n.name ?? ''}`, n)]);
  const messages = Object.keys(definition)
    .filter((name) => name.startsWith('dedup.v1.') && (definition[name] as DescriptorMessage).type?.field !== undefined)
    .flatMap((name) => [name, ...nested(name, (definition[name] as DescriptorMessage).type as MessageType)]);
  assert.deepEqual(messages.sort(), Object.keys(wire.WIRE_FIELDS).sort());
});

test('every service method is mapped', () => {
  const service = wire.packageDefinition()[wire.SERVICE_NAME];
  assert.ok(service);
  const methods: wire.MethodName[] = [
    'Begin', 'Complete', 'Release', 'Renew', 'Checkpoint', 'Get', 'Forget', 'BeginBatch', 'CompleteBatch',
    'CheckpointBatch',
  ];
  // In the contract, mapped above, but not called by this client yet.
  const streams = ['Session'];
  assert.deepEqual(Object.keys(service).sort(), [...methods, ...streams].sort());
  for (const m of methods) assert.equal(wire.methodDefinition(m).path, `/dedup.v1.Dedup/${m}`);
});

test('unknown enum values from the server are refused, not guessed', () => {
  const answer: wire.BeginResponseWire = {
    status: 9, fence: '1', takeover: false, outcome: 'OUTCOME_UNSPECIFIED', result: Buffer.alloc(0), created_at: '0',
    completed_at: '0', expires_at: '0', lease_expires_at: '0', attempts: 1, retry_after_ms: 0, checkpoint: null,
    rerun: false, tombstone_expires_at: '0',
  };
  assert.throws(() => wire.beginResponseFromWire(answer), DedupProtocolError);
  assert.equal(wire.beginResponseFromWire({ ...answer, status: 'IN_USE' }).outcome, null);
});

test('fences are exact uint64 both ways', () => {
  const max = 0xffffffffffffffffn;
  assert.equal(wire.releaseRequestToWire({ namespace: 'n', key: 'k', fence: max }).fence, '18446744073709551615');
  assert.equal(wire.releaseResponseFromWire({ status: 'OK', fence: '18446744073709551615' }).fence, max);
  assert.throws(() => wire.releaseRequestToWire({ namespace: 'n', key: 'k', fence: -1n }), RangeError);
});

test('out-of-range uint32 options are refused instead of wrapped', () => {
  assert.throws(() => wire.beginRequestToWire({ namespace: 'n', key: 'k', waitMs: 2 ** 32 }), /waitMs/);
  assert.throws(() => wire.beginRequestToWire({ namespace: 'n', key: 'k', leaseMs: 1.5 }), /leaseMs/);
});

test('batch answers pair with items by position: errors are typed, a count mismatch or an empty item is refused', () => {
  const response: wire.CompleteResponseWire = { status: 'OK', fence: '7', expires_at: '9' };
  const results = wire.completeBatchResponseFromWire(
    { items: [{ response }, { error: { code: 3, message: 'items[1].fence: must be non-zero', reason: '', leader: '', retry_after_ms: 0 } }] },
    2,
  );
  assert.deepEqual(results, [
    { ok: true, answer: { status: 'OK', fence: 7n, expiresAt: 9 } },
    { ok: false, code: 3, message: 'items[1].fence: must be non-zero' },
  ]);
  assert.throws(() => wire.completeBatchResponseFromWire({ items: [{ response }] }, 2), DedupProtocolError);
  assert.throws(() => wire.completeBatchResponseFromWire({ items: [{ response }, {}] }, 2), /items\[1\]/);
});

test("an item error's reason, leader and delay are kept when the server gives them", () => {
  const none = { reason: '', leader: '', retry_after_ms: 0 };
  const results = wire.beginBatchResponseFromWire(
    {
      items: [
        { error: { ...none, code: 14, message: 'items[0].results: over the budget', reason: 'RESULT_BUDGET' } },
        { error: { ...none, code: 14, message: 'not the leader', leader: '127.0.0.2:7001' } },
        { error: { ...none, code: 8, message: 'tenant "t" is over its limit', retry_after_ms: 250 } },
      ],
    },
    3,
  );
  assert.deepEqual(results, [
    { ok: false, code: 14, message: 'items[0].results: over the budget', reason: 'RESULT_BUDGET' },
    { ok: false, code: 14, message: 'not the leader', leader: '127.0.0.2:7001' },
    { ok: false, code: 8, message: 'tenant "t" is over its limit', retryAfterMs: 250 },
  ]);
});

test('batch items are checked like unary requests', () => {
  assert.throws(() => wire.beginBatchRequestToWire([{ namespace: 'n', key: 'k' }, { namespace: 'n', key: 'k', leaseMs: -1 }]), /leaseMs/);
  assert.deepEqual(wire.beginBatchRequestToWire([{ namespace: 'n', key: 'k', owner: 'o' }]).items[0]?.wait_ms, 0);
});

test('EXPIRED, rerun, tombstone and checkpoint fields map both ways', () => {
  const base: wire.BeginResponseWire = {
    status: 'EXPIRED', fence: '4', takeover: false, outcome: 'SUCCESS', result: Buffer.alloc(0), created_at: '10',
    completed_at: '20', expires_at: '0', lease_expires_at: '0', attempts: 1, retry_after_ms: 0, checkpoint: null,
    rerun: false, tombstone_expires_at: '99',
  };
  const expired = wire.beginResponseFromWire(base);
  assert.deepEqual([expired.status, expired.outcome, expired.completedAt, expired.tombstoneExpiresAt, expired.checkpoint],
    ['EXPIRED', 'SUCCESS', 20, 99, null]);
  const started = wire.beginResponseFromWire({
    ...base, status: 'STARTED', outcome: 'OUTCOME_UNSPECIFIED', rerun: true,
    checkpoint: { step: 'charged', data: Buffer.from('ch_1'), fence: '18446744073709551615', recorded_at: '30' },
  });
  assert.equal(started.rerun, true);
  assert.deepEqual(started.checkpoint, { step: 'charged', data: Buffer.from('ch_1'), fence: 0xffffffffffffffffn, recordedAt: 30 });
  assert.equal(wire.beginRequestToWire({ namespace: 'n', key: 'k', acceptRerun: true }).accept_rerun, true);
  assert.equal(wire.beginRequestToWire({ namespace: 'n', key: 'k' }).accept_rerun, false);
  assert.deepEqual(wire.checkpointRequestToWire({ namespace: 'n', key: 'k', fence: 3n, step: 's', data: 'é' }), {
    namespace: 'n', key: 'k', fence: '3', step: 's', data: Buffer.from('é', 'utf8'), lease_ms: 0,
  });
  assert.throws(() => wire.checkpointRequestToWire({ namespace: 'n', key: 'k', fence: 3n, step: 's', leaseMs: -5 }), /leaseMs/);
  assert.deepEqual(wire.checkpointResponseFromWire({ status: 'STALE_FENCE', fence: '5', lease_expires_at: '0' }),
    { status: 'STALE_FENCE', fence: 5n, leaseExpiresAt: 0 });
});
