// The README's "Use from an MCP server" snippet must stay true: every code
// line in it (comments and `// ...` elisions aside) is a line of this
// example's sources, which the end-to-end tests run.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// From dist/test/ up to the example and the client package.
const README = fileURLToPath(new URL('../../../../README.md', import.meta.url));
const SOURCES = fileURLToPath(new URL('../../src/', import.meta.url));

function codeLine(line: string): string {
  return line.replace(/\s+\/\/ .*$/, '').trim();
}

test('README snippet lines exist in examples/mcp-invoices/src', () => {
  const readme = readFileSync(README, 'utf8');
  const section = readme.split('## Use from an MCP server')[1];
  const snippet = section?.match(/```ts\n([\s\S]*?)```/)?.[1];
  assert.ok(snippet, 'no ```ts block under "## Use from an MCP server"');

  const sourceLines = new Set(
    readdirSync(SOURCES)
      .filter((f) => f.endsWith('.ts'))
      .flatMap((f) => readFileSync(join(SOURCES, f), 'utf8').split('\n').map(codeLine)),
  );
  const lines = snippet.split('\n').map(codeLine).filter((l) => l !== '' && !l.startsWith('//'));
  assert.ok(lines.length > 20);
  const missing = lines.filter((l) => !sourceLines.has(l));
  assert.deepEqual(missing, [], 'README lines not found in the example sources');
});
