// The published form of @dedup/client: `npm pack` in client/typescript, the
// tarball installed into an empty project (its dependencies from the npm
// cache, else the registry), then used from plain JavaScript against a real
// dedupd (consumer/roundtrip.mjs) and from TypeScript with its declarations
// (consumer/types-check.ts, tsc --noEmit with the client's own compiler).
//
// Env: DEDUPD (the dedupd binary; default <repo>/build/server/dedupd).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const clientDir = join(repo, 'client', 'typescript');
const dedupd = process.env.DEDUPD || join(repo, 'build', 'server', 'dedupd');
const npmEnv = {
  ...process.env,
  DEDUPD: dedupd,
  npm_config_audit: 'false',
  npm_config_fund: 'false',
  npm_config_update_notifier: 'false',
};

let work;
let tarball;
let project;

function run(command, args, cwd) {
  return execFileSync(command, args, { cwd, env: npmEnv, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

before(() => {
  work = mkdtempSync(join(tmpdir(), 'dedup-npm-package-'));
  // `npm pack` runs the package's prepare script (the build) first.
  run('npm', ['pack', '--pack-destination', work], clientDir);
  const packed = readdirSync(work).filter((f) => f.endsWith('.tgz'));
  assert.equal(packed.length, 1, `tarballs: ${packed}`);
  tarball = join(work, packed[0]);
  project = join(work, 'consumer');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
});

after(() => {
  if (work !== undefined) rmSync(work, { recursive: true, force: true });
});

test('the tarball holds the built package, the proto and the license; no tests, sources or maps', () => {
  const files = run('tar', ['-tzf', tarball], work)
    .split('\n')
    .filter((f) => f !== '' && !f.endsWith('/'))
    .map((f) => f.replace(/^package\//, ''));
  for (const wanted of ['LICENSE', 'README.md', 'package.json', 'proto/dedup/v1/dedup.proto', 'dist/src/index.js',
    'dist/src/index.d.ts', 'dist/src/testing/dedupd.js', 'dist/src/lease-keeper.js']) {
    assert.ok(files.includes(wanted), `${wanted} missing from ${files.join(', ')}`);
  }
  assert.deepEqual(files.filter((f) => f.startsWith('dist/test/') || f.startsWith('src/') || f.endsWith('.map')), []);
  const license = run('tar', ['-xzOf', tarball, 'package/LICENSE'], work);
  assert.equal(license, readFileSync(join(repo, 'LICENSE'), 'utf8'));
  const manifest = JSON.parse(run('tar', ['-xzOf', tarball, 'package/package.json'], work));
  assert.equal(manifest.license, 'Apache-2.0');
  assert.equal(manifest.private, undefined);
});

test('installs into an empty project and runs a Begin/Complete round trip from plain JavaScript', () => {
  run('npm', ['install', '--prefer-offline', tarball], project);
  const installed = JSON.parse(readFileSync(join(project, 'node_modules', '@dedup', 'client', 'package.json'), 'utf8'));
  assert.equal(installed.name, '@dedup/client');
  copyFileSync(join(here, 'consumer', 'roundtrip.mjs'), join(project, 'roundtrip.mjs'));
  const out = JSON.parse(run(process.execPath, ['roundtrip.mjs'], project).trim());
  assert.deepEqual([out.begin, out.complete, out.replay], ['STARTED', 'OK', 'DUPLICATE']);
});

// What a consumer's tsconfig may say: node10 ("node", the default of many
// older projects: no "exports", so the top-level "types" and typesVersions
// must lead to the declarations), node16 and bundler.
const RESOLUTIONS = [
  { moduleResolution: 'node10', module: 'ES2022' },
  { moduleResolution: 'node16', module: 'node16' },
  { moduleResolution: 'bundler', module: 'ESNext' },
];

function typeCheckWith(resolution) {
  copyFileSync(join(here, 'consumer', 'types-check.ts'), join(project, 'types-check.ts'));
  const base = JSON.parse(readFileSync(join(here, 'consumer', 'tsconfig.json'), 'utf8'));
  const config = { ...base, compilerOptions: { ...base.compilerOptions, ...resolution } };
  const file = `tsconfig.${resolution.moduleResolution}.json`;
  writeFileSync(join(project, file), JSON.stringify(config));
  const tsc = join(clientDir, 'node_modules', 'typescript', 'bin', 'tsc');
  run(process.execPath, [tsc, '-p', join(project, file), '--typeRoots', join(clientDir, 'node_modules', '@types')], project);
}

test('the package.json names its repository, homepage and declarations', () => {
  const manifest = JSON.parse(readFileSync(join(clientDir, 'package.json'), 'utf8'));
  assert.match(manifest.homepage, /^https:\/\//);
  assert.match(manifest.repository.url, /^git\+https:\/\/.*\.git$/);
  assert.equal(manifest.repository.directory, 'client/typescript');
  assert.equal(manifest.types, manifest.exports['.'].types);
});

for (const resolution of RESOLUTIONS) {
  test(`type-checks the consumer under moduleResolution ${resolution.moduleResolution}`, () => {
    run('npm', ['install', '--prefer-offline', tarball], project);
    try {
      typeCheckWith(resolution);
    } catch (error) {
      assert.fail(`tsc (${resolution.moduleResolution}) failed:\n${error.stdout}${error.stderr}`);
    }
  });
}

test('type-checks a TypeScript consumer against the installed declarations', () => {
  for (const file of ['types-check.ts', 'tsconfig.json']) copyFileSync(join(here, 'consumer', file), join(project, file));
  const tsc = join(clientDir, 'node_modules', 'typescript', 'bin', 'tsc');
  // The client's TypeScript and @types/node: the consumer project holds only
  // the tarball and its dependencies.
  const typeRoots = join(clientDir, 'node_modules', '@types');
  try {
    run(process.execPath, [tsc, '-p', project, '--typeRoots', typeRoots], project);
  } catch (error) {
    assert.fail(`tsc --noEmit failed:\n${error.stdout}${error.stderr}`);
  }
  // And the check can fail: a misuse of the API is an error.
  writeFileSync(join(project, 'types-check.ts'), `${readFileSync(join(project, 'types-check.ts'), 'utf8')}\nnew DedupClient({ address: 1 });\n`);
  assert.throws(() => run(process.execPath, [tsc, '-p', project, '--typeRoots', typeRoots], project), (error) => {
    assert.match(error.stdout, /types-check\.ts.*error TS2322/);
    return true;
  });
});
