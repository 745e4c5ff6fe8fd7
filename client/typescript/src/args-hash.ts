// The canonical args_hash every dedup client sends: SHA-256 over the UTF-8
// bytes of the RFC 8785 canonical JSON of the tool arguments. Shared test
// vectors (<repo>/tests/vectors/args_hash.json) pin it across languages.
import { createHash } from 'node:crypto';

import { canonicalize } from './canonical-json.js';

/** SHA-256 of the canonical JSON of `args`: 32 raw bytes, as BeginRequest.args_hash wants. */
export function argsHash(args: unknown): Buffer {
  return createHash('sha256').update(canonicalize(args), 'utf8').digest();
}

/** argsHash as 64 lowercase hex characters (what withIdempotency uses as a key when none is given). */
export function argsHashHex(args: unknown): string {
  return argsHash(args).toString('hex');
}
