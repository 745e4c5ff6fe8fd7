// slotOf: the shared vectors (<repo>/tests/vectors/slot.json, computed by the
// C++ SlotOf; DEDUP_SLOT_VECTORS overrides the path) and a plain 64-bit
// FNV-1a reference, since slotOf keeps only the hash's low 32 bits.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { SLOT_COUNT, slotOf } from '../src/index.js';

interface Vector {
  readonly namespace: string;
  readonly key: string;
  readonly slot: number;
}

// From dist/test/ up to <repo>.
const VECTORS_PATH =
  process.env['DEDUP_SLOT_VECTORS'] || fileURLToPath(new URL('../../../../tests/vectors/slot.json', import.meta.url));
const vectors = (JSON.parse(readFileSync(VECTORS_PATH, 'utf8')) as { vectors: Vector[] }).vectors;

function fnv1a64(bytes: Uint8Array): bigint {
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) h = BigInt.asUintN(64, (h ^ BigInt(b)) * 0x100000001b3n);
  return h;
}

function referenceSlot(namespace: string, key: string): number {
  const bytes = Buffer.concat([Buffer.from(namespace, 'utf8'), Buffer.from([0]), Buffer.from(key, 'utf8')]);
  return Number(fnv1a64(bytes) % BigInt(SLOT_COUNT));
}

test('the vector file is not empty', () => {
  assert.ok(vectors.length >= 20, `only ${vectors.length} vectors in ${VECTORS_PATH}`);
});

test('every shared vector', () => {
  for (const v of vectors) assert.equal(slotOf(v.namespace, v.key), v.slot, `${v.namespace} / ${v.key}`);
});

test('the 64-bit reference: FNV-1a published values, and the same slots as slotOf', () => {
  assert.equal(fnv1a64(new Uint8Array(0)), 0xcbf29ce484222325n);
  assert.equal(fnv1a64(Buffer.from('a')), 0xaf63dc4c8601ec8cn);
  assert.equal(fnv1a64(Buffer.from('foobar')), 0x85944171f73967e8n);
  for (const v of vectors) assert.equal(referenceSlot(v.namespace, v.key), v.slot);
  for (let i = 0; i < 2000; i++) {
    const key = `key-${i}-${'é'.repeat(i % 5)}-${String.fromCodePoint(0x1f600 + (i % 50))}`;
    assert.equal(slotOf('ns', key), referenceSlot('ns', key), key);
  }
});
