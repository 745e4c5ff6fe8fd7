// Copies the one source of truth for the API, <repo>/proto/dedup/v1/dedup.proto,
// into this package so dist/ can load it at run time wherever the package is
// installed (a `file:` dependency, a packed tarball). The copy is a build
// output: it is git-ignored and never edited by hand.
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(packageDir, '..', '..', 'proto', 'dedup', 'v1', 'dedup.proto');
const target = join(packageDir, 'proto', 'dedup', 'v1', 'dedup.proto');
mkdirSync(dirname(target), { recursive: true });
copyFileSync(source, target);
