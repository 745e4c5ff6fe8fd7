// RFC 8785 (JSON Canonicalization Scheme) serialization.
//
// Every dedup client (C++, Python, TypeScript) must turn the same tool
// arguments into the same bytes, or the same call would hash differently per
// language and look like a CONFLICT. So this is written out rule by rule
// rather than relying on JSON.stringify's object key order, and anything that
// JSON cannot represent exactly is rejected instead of silently dropped
// (JSON.stringify turns `undefined` members into nothing and NaN into null,
// which would make different arguments hash alike).

/** A value that canonicalizes: what JSON.parse can return. */
export type JsonValue =
  | null
  | boolean
  | number
  | string
  | readonly JsonValue[]
  | { readonly [key: string]: JsonValue };

/** Thrown for input that has no RFC 8785 form. `path` locates it, e.g. `$.items[2].price`. */
export class CanonicalJsonError extends Error {
  override readonly name = 'CanonicalJsonError';
  constructor(
    readonly path: string,
    reason: string,
  ) {
    super(`cannot canonicalize ${path}: ${reason}`);
  }
}

/**
 * Returns the RFC 8785 canonical JSON text of `value`.
 *
 * Accepts what JSON.parse produces: null, booleans, finite numbers, strings
 * (well-formed UTF-16), arrays and plain objects. Throws CanonicalJsonError
 * for anything else: undefined (also as an object member or array hole),
 * NaN/Infinity, bigint, symbols, functions, lone surrogates, cycles, and
 * non-plain objects such as Date or Map (convert them to JSON values first,
 * so the hash never depends on a toJSON method).
 */
export function canonicalize(value: unknown): string {
  const parts: string[] = [];
  write(value, '$', parts, new Set<object>());
  return parts.join('');
}

function write(value: unknown, path: string, out: string[], ancestors: Set<object>): void {
  switch (typeof value) {
    case 'string':
      out.push(serializeString(value, path));
      return;
    case 'number':
      out.push(serializeNumber(value, path));
      return;
    case 'boolean':
      out.push(value ? 'true' : 'false');
      return;
    case 'object':
      if (value === null) {
        out.push('null');
        return;
      }
      writeContainer(value, path, out, ancestors);
      return;
    case 'undefined':
      throw new CanonicalJsonError(path, 'undefined is not a JSON value (omit the member instead)');
    case 'bigint':
      throw new CanonicalJsonError(path, 'bigint is not a JSON value (use a number or a string)');
    case 'symbol':
    case 'function':
      throw new CanonicalJsonError(path, `${typeof value} is not a JSON value`);
  }
}

function writeContainer(value: object, path: string, out: string[], ancestors: Set<object>): void {
  if (ancestors.has(value)) throw new CanonicalJsonError(path, 'cyclic reference');
  ancestors.add(value);
  if (Array.isArray(value)) {
    writeArray(value, path, out, ancestors);
  } else {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      const kind = value.constructor?.name ?? 'object';
      throw new CanonicalJsonError(path, `${kind} is not a plain object; convert it to a JSON value first`);
    }
    writeObject(value as Record<string, unknown>, path, out, ancestors);
  }
  ancestors.delete(value);
}

function writeArray(value: readonly unknown[], path: string, out: string[], ancestors: Set<object>): void {
  out.push('[');
  for (let i = 0; i < value.length; i++) {
    if (i > 0) out.push(',');
    // Index access (not for..of) so holes are seen as undefined and rejected.
    write(value[i], `${path}[${i}]`, out, ancestors);
  }
  out.push(']');
}

function writeObject(value: Record<string, unknown>, path: string, out: string[], ancestors: Set<object>): void {
  if (Object.getOwnPropertySymbols(value).length > 0) {
    throw new CanonicalJsonError(path, 'symbol-keyed properties are not JSON');
  }
  // RFC 8785 §3.2.3: members sorted by their names as arrays of UTF-16 code
  // units, compared unsigned. (Not by code point, not by locale.)
  const keys = Object.keys(value).sort(compareUtf16);
  out.push('{');
  keys.forEach((key, i) => {
    if (i > 0) out.push(',');
    const memberPath = `${path}.${key}`;
    out.push(serializeString(key, memberPath), ':');
    write(value[key], memberPath, out, ancestors);
  });
  out.push('}');
}

/** Orders strings by UTF-16 code units, the order RFC 8785 sorts member names in. */
export function compareUtf16(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = a.charCodeAt(i) - b.charCodeAt(i);
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

// RFC 8785 §3.2.2.3: numbers are serialized exactly as ECMAScript's
// Number.prototype.toString does (shortest round-trip digits, exponent from
// 1e21 and below 1e-6, -0 as 0), which is this engine's own algorithm.
function serializeNumber(value: number, path: string): string {
  if (!Number.isFinite(value)) {
    throw new CanonicalJsonError(path, `${String(value)} is not a JSON number`);
  }
  return Object.is(value, -0) ? '0' : String(value);
}

// RFC 8785 §3.2.2.2: JSON.stringify's string escaping (\" \\ \b \f \n \r \t,
// other controls as \u00xx lowercase, everything else literal). A lone
// surrogate has no UTF-8 encoding, so the hash input would be ill-defined
// (I-JSON, which RFC 8785 builds on, forbids it): reject it.
// In a /u regex a valid surrogate pair is one code point, so this matches
// only unpaired halves (String.prototype.isWellFormed needs Node 20).
const LONE_SURROGATE = /\p{Surrogate}/u;

function serializeString(value: string, path: string): string {
  if (LONE_SURROGATE.test(value)) {
    throw new CanonicalJsonError(path, 'string contains a lone UTF-16 surrogate');
  }
  return JSON.stringify(value);
}
