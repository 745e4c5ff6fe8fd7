// The shared args_hash vectors (<repo>/tests/vectors/args_hash.json): every
// client must produce the canonical text and the SHA-256 byte for byte.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { argsHash, argsHashHex, canonicalize } from '../src/index.js';

interface Vector {
  readonly name: string;
  readonly input: string;
  readonly canonical: string;
  readonly sha256: string;
}

// From dist/test/ up to <repo>.
const VECTORS_PATH = fileURLToPath(new URL('../../../../tests/vectors/args_hash.json', import.meta.url));
const vectors = (JSON.parse(readFileSync(VECTORS_PATH, 'utf8')) as { vectors: Vector[] }).vectors;

test('the vector file is not empty', () => {
  assert.ok(vectors.length >= 10, `only ${vectors.length} vectors in ${VECTORS_PATH}`);
});

for (const v of vectors) {
  test(`vector: ${v.name}`, () => {
    const parsed: unknown = JSON.parse(v.input);
    assert.equal(canonicalize(parsed), v.canonical);
    assert.equal(argsHashHex(parsed), v.sha256);
    assert.deepEqual(argsHash(parsed), Buffer.from(v.sha256, 'hex'));
    assert.equal(argsHash(parsed).length, 32);
    // Canonical text is a fixed point.
    assert.equal(canonicalize(JSON.parse(v.canonical)), v.canonical);
  });
}
