// The hand-written wire mapping must cover dedup.proto exactly, so a field
// added to the contract fails here instead of being silently dropped.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DedupProtocolError } from '../src/index.js';
import * as wire from '../src/wire.js';

interface DescriptorMessage {
  readonly type?: { readonly field?: ReadonlyArray<{ readonly name: string }> };
}

test('WIRE_FIELDS name every field of every mapped message', () => {
  const definition = wire.packageDefinition();
  for (const [message, fields] of Object.entries(wire.WIRE_FIELDS)) {
    const descriptor = definition[message] as DescriptorMessage | undefined;
    assert.ok(descriptor?.type?.field, `${message} is not in dedup.proto`);
    const protoFields = descriptor.type.field.map((f) => f.name).sort();
    assert.deepEqual([...fields].sort(), protoFields, message);
  }
});

test('every service method is mapped', () => {
  const service = wire.packageDefinition()[wire.SERVICE_NAME];
  assert.ok(service);
  const methods: wire.MethodName[] = ['Begin', 'Complete', 'Release', 'Renew', 'Get', 'Forget'];
  assert.deepEqual(Object.keys(service).sort(), [...methods].sort());
  for (const m of methods) assert.equal(wire.methodDefinition(m).path, `/dedup.v1.Dedup/${m}`);
});

test('unknown enum values from the server are refused, not guessed', () => {
  const answer: wire.BeginResponseWire = {
    status: 9, fence: '1', takeover: false, outcome: 'OUTCOME_UNSPECIFIED', result: Buffer.alloc(0), created_at: '0',
    completed_at: '0', expires_at: '0', lease_expires_at: '0', attempts: 1, retry_after_ms: 0,
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
