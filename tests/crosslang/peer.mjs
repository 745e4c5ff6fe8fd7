// The TypeScript side of the cross-language replay test (test_crosslang.py
// drives it): through withIdempotency from the built client
// (client/typescript/dist, or env DEDUP_TS_CLIENT: its dist/src/index.js).
//
//   node peer.mjs TARGET CASES_JSON store    stores cases.origins.typescript's
//       success and error under typescript:success / typescript:error
//   node peer.mjs TARGET CASES_JSON replay   replays the cpp and python
//       origins' keys, which must not run fn
//
// Prints "ok <check>" per check passed and "FAIL <check>: <why>" per check
// failed; exits 1 if any failed.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const clientUrl = process.env.DEDUP_TS_CLIENT
  ? pathToFileURL(process.env.DEDUP_TS_CLIENT).href
  : new URL('../../client/typescript/dist/src/index.js', import.meta.url).href;
const { DedupClient, ReplayedError, canonicalize, withIdempotency } = await import(clientUrl);

let failures = 0;

function check(passed, what, why) {
  if (passed) {
    console.log(`ok ${what}`);
  } else {
    console.log(`FAIL ${what}: ${why}`);
    failures += 1;
  }
}

// RFC 8785 form: key order and number spelling may differ between writers,
// the value must not.
function sameValue(got, expected) {
  return canonicalize(got) === canonicalize(expected);
}

function show(value) {
  return JSON.stringify(value, (_key, v) => (typeof v === 'bigint' ? v.toString() : v));
}

async function store(client, ns, args, mine) {
  let ran = false;
  try {
    const result = await withIdempotency(client, { namespace: ns, key: 'typescript:success', args }, () => {
      ran = true;
      return mine.value;
    });
    check(ran && !result.duplicate && sameValue(result.result, mine.value), 'typescript:success stored',
      `ran ${ran}, got ${show(result)}`);
  } catch (error) {
    check(false, 'typescript:success stored', String(error?.stack ?? error));
  }

  // The stored name is error.name, and a string or number `code` is kept.
  const raised = Object.assign(new Error(mine.error.message), { name: mine.error.name, code: mine.error.code });
  try {
    await withIdempotency(client, { namespace: ns, key: 'typescript:error', args }, () => {
      throw raised;
    });
    check(false, 'typescript:error stored', "fn's error was not rethrown");
  } catch (error) {
    check(error === raised, 'typescript:error stored', String(error?.stack ?? error));
  }
}

async function replay(client, ns, args, origin, spec) {
  let ran = false;
  const mustNotRun = () => {
    ran = true;
    return 'fn ran: not a replay';
  };

  let key = `${origin}:success`;
  try {
    const result = await withIdempotency(client, { namespace: ns, key, args }, mustNotRun);
    check(!ran && result.duplicate && sameValue(result.result, spec.value), `${key} replayed`,
      `ran ${ran}, got ${show(result)}`);
  } catch (error) {
    check(false, `${key} replayed`, String(error?.stack ?? error));
  }

  key = `${origin}:error`;
  try {
    const result = await withIdempotency(client, { namespace: ns, key, args }, mustNotRun);
    check(false, `${key} replayed`, `no ReplayedError: ran ${ran}, got ${show(result)}`);
  } catch (error) {
    if (!(error instanceof ReplayedError)) {
      check(false, `${key} replayed`, String(error?.stack ?? error));
      return;
    }
    const { name, message, code } = error.stored;
    check(!ran && name === spec.error.name && message === spec.error.message && code === spec.error.code,
      `${key} replayed`, `ran ${ran}, stored ${show(error.stored)}`);
  }
}

const [target, casesPath, mode] = process.argv.slice(2);
if (!['store', 'replay'].includes(mode)) {
  console.error('usage: node peer.mjs TARGET CASES_JSON store|replay');
  process.exit(2);
}
const cases = JSON.parse(readFileSync(casesPath, 'utf8'));
const { namespace: ns, args, origins } = cases;
const client = new DedupClient({ address: target });
try {
  if (mode === 'store') {
    await store(client, ns, args, origins.typescript);
  } else {
    for (const origin of ['cpp', 'python']) await replay(client, ns, args, origin, origins[origin]);
  }
} finally {
  client.close();
}
process.exit(failures === 0 ? 0 : 1);
