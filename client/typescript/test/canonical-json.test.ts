// RFC 8785 rules beyond the shared vectors, and the values that must be refused.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { CanonicalJsonError, canonicalize, compareUtf16 } from '../src/index.js';

test('members sort by UTF-16 code units, not code points', () => {
  // U+10000 is the surrogate pair D800 DC00, which sorts before U+FFFF by code
  // unit although its code point is higher.
  assert.equal(canonicalize({ '\uffff': 1, '\u{10000}': 2 }), '{"\u{10000}":2,"\uffff":1}');
  assert.ok(compareUtf16('\u{10000}', '\uffff') < 0);
  assert.ok(compareUtf16('a', 'ab') < 0);
  assert.equal(compareUtf16('x', 'x'), 0);
});

test('numbers use ECMAScript serialization', () => {
  assert.equal(canonicalize([-0, 1e21, 1e-7, 0.000001, 5e-324, 1.7976931348623157e308]), '[0,1e+21,1e-7,0.000001,5e-324,1.7976931348623157e+308]');
});

test('objects with a null prototype are plain', () => {
  const o = Object.create(null) as Record<string, unknown>;
  o['b'] = 1;
  o['a'] = [true];
  assert.equal(canonicalize(o), '{"a":[true],"b":1}');
});

const refused: ReadonlyArray<[string, () => unknown, RegExp]> = [
  ['undefined', () => undefined, /^cannot canonicalize \$: undefined/],
  ['undefined member', () => ({ a: { b: undefined } }), /\$\.a\.b: undefined/],
  ['array hole', () => [1, , 3], /\$\[1\]: undefined/], // eslint-disable-line no-sparse-arrays
  ['NaN', () => ({ n: NaN }), /\$\.n: NaN is not a JSON number/],
  ['Infinity', () => [-Infinity], /-Infinity is not a JSON number/],
  ['bigint', () => ({ n: 1n }), /bigint is not a JSON value/],
  ['symbol', () => Symbol('s'), /symbol is not a JSON value/],
  ['function', () => ({ f: () => 1 }), /function is not a JSON value/],
  ['symbol key', () => ({ [Symbol('k')]: 1 }), /symbol-keyed/],
  ['lone surrogate', () => ({ s: 'a\ud800b' }), /lone UTF-16 surrogate/],
  ['lone surrogate in a key', () => ({ '\udc00': 1 }), /lone UTF-16 surrogate/],
  ['Date', () => ({ when: new Date(0) }), /Date is not a plain object/],
  ['Map', () => new Map(), /Map is not a plain object/],
];

for (const [name, make, message] of refused) {
  test(`refuses ${name}`, () => {
    assert.throws(() => canonicalize(make()), (error: unknown) => {
      assert.ok(error instanceof CanonicalJsonError);
      assert.match(error.message, message);
      return true;
    });
  });
}

test('refuses cycles but allows shared (acyclic) references', () => {
  const shared = { x: 1 };
  assert.equal(canonicalize({ a: shared, b: shared }), '{"a":{"x":1},"b":{"x":1}}');
  const cyclic: Record<string, unknown> = {};
  cyclic['self'] = cyclic;
  assert.throws(() => canonicalize(cyclic), /\$\.self: cyclic reference/);
});
