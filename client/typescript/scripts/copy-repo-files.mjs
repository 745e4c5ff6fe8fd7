// Copies files whose one source of truth is the repository root into this
// package, so the published package carries them (the copies are build
// outputs: git-ignored, never edited by hand):
// - proto/dedup/v1/dedup.proto and cluster.proto (its ShardMap, for routing
//   by slot): dist/ loads the API contract at run time wherever the package
//   is installed (a `file:` dependency, a packed tarball);
// - LICENSE: npm packs a package's own LICENSE file, and the license is the
//   repository's.
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const repoDir = join(packageDir, '..', '..');
for (const file of [join('proto', 'dedup', 'v1', 'dedup.proto'), join('proto', 'dedup', 'v1', 'cluster.proto'), 'LICENSE']) {
  const target = join(packageDir, file);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(join(repoDir, file), target);
}
