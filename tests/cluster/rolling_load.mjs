// The TypeScript helper's load for the rolling restart test
// (rolling_restart_test.py): callers running withIdempotency on a
// DedupClient each, with the group's addresses in their own order, on fresh
// keys and on a small pool of keys every caller repeats, until STOP_FILE
// exists. Writes "KEY<TAB>ARGS_HASH_HEX<TAB>RESULT_JSON" per outcome to
// OUT_FILE, prints "calls: N failures: F" and exits 1 if any call failed.
//
//   node rolling_load.mjs CLIENT_INDEX_JS ADDRESSES OUT_FILE STOP_FILE CALLERS
import { existsSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const [indexJs, addressList, outFile, stopFile, callerCount] = process.argv.slice(2);
const { DedupClient, argsHashHex } = await import(pathToFileURL(indexJs).href);
const NAMESPACE = 'roll-ts';
const REPEATED_KEYS = 32;
const addresses = addressList.split(',');
const lines = [];
let calls = 0;
let failures = 0;

async function caller(id) {
  const order = [...addresses.slice(id % 3), ...addresses.slice(0, id % 3)];
  const client = new DedupClient({ addresses: order });
  try {
    for (let i = 0; !existsSync(stopFile); ++i) {
      const key = i % 4 === 3 ? `rep-${i % REPEATED_KEYS}` : `t${id}-${i}`;
      const args = { key };
      try {
        const run = await client.withIdempotency(
          { namespace: NAMESPACE, key, args }, async () => ({ key, by: id }));
        lines.push(`${key}\t${argsHashHex(args)}\t${JSON.stringify(run.result)}`);
      } catch (error) {
        ++failures;
        console.error(`withIdempotency ${key}: ${error?.code ?? ''} ${error?.message ?? error}`);
      }
      ++calls;
    }
  } finally {
    client.close();
  }
}

await Promise.all(Array.from({ length: Number(callerCount) }, (_, id) => caller(id)));
writeFileSync(outFile, lines.map((line) => `${line}\n`).join(''));
console.log(`calls: ${calls} failures: ${failures}`);
process.exit(failures === 0 ? 0 : 1);
