// Starts a real dedupd for integration and end-to-end tests (exported as
// @dedup/client/testing so the MCP example's tests share it). Not for
// production use.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface DedupdOptions {
  /** Extra flags, e.g. ['--min_lease_ms=100']. */
  readonly args?: readonly string[];
  /** Default: env DEDUPD, else <repo>/build/server/dedupd. */
  readonly binary?: string;
  /** How long to wait for "dedupd listening on ..." (ms). Default 15000. */
  readonly startTimeoutMs?: number;
  /** Serve Prometheus /metrics on a free port (`Dedupd.metricsAddress`). Default false. */
  readonly metrics?: boolean;
}

export interface Dedupd {
  /** "127.0.0.1:PORT" */
  readonly address: string;
  /** "127.0.0.1:PORT" of /metrics, with the `metrics` option. */
  readonly metricsAddress?: string;
  readonly dataDir: string;
  readonly process: ChildProcess;
  /** SIGTERM, wait for exit (SIGKILL after 5 s), remove the data dir. Idempotent. */
  stop(): Promise<void>;
}

// From <repo>/client/typescript/dist/src/testing/ up to <repo>.
const DEFAULT_BINARY = fileURLToPath(new URL('../../../../../build/server/dedupd', import.meta.url));

// Tests that crash must not leave servers behind.
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** Kills `child` (SIGKILL) if it is still running when this process exits. Resolves when it exits. */
export function killOnExit(child: ChildProcess): Promise<void> {
  running.add(child);
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  void exited.then(() => running.delete(child));
  return exited;
}

export function dedupdBinary(): string {
  const fromEnv = process.env['DEDUPD'];
  return fromEnv !== undefined && fromEnv !== '' ? fromEnv : DEFAULT_BINARY;
}

export async function startDedupd(options: DedupdOptions = {}): Promise<Dedupd> {
  try {
    // No metrics endpoint: its default port (9464) would collide between
    // servers running side by side (parallel tests, a developer's dedupd).
    return await launch(options, [`--metrics_address=${options.metrics === true ? '127.0.0.1:0' : ''}`]);
  } catch (error) {
    // A dedupd built before metrics existed refuses the flag ("unknown flag
    // --metrics_address", exit 2; exit 1 from older builds).
    if (error instanceof Error && /exited \([12]\)[\s\S]*metrics_address/.test(error.message)) return launch(options, []);
    throw error;
  }
}

async function launch(options: DedupdOptions, extraFlags: readonly string[]): Promise<Dedupd> {
  const dataDir = mkdtempSync(join(tmpdir(), 'dedupd-test-'));
  const child = spawn(
    options.binary ?? dedupdBinary(),
    ['--address=127.0.0.1:0', `--data_dir=${dataDir}`, '--durability=none', ...extraFlags, ...(options.args ?? [])],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const exited = killOnExit(child);

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    })();
    return stopping;
  };

  // dedupd prints "dedupd metrics on HOST:PORT" before its "listening" line.
  let metricsAddress: string | undefined;
  let head = '';
  const listening = waitForListening(child, options.startTimeoutMs ?? 15_000);
  child.stderr?.on('data', (chunk: string) => {
    if (metricsAddress !== undefined || head.length > 8192) return;
    head += chunk;
    metricsAddress = /dedupd metrics on (\S+:\d+)/.exec(head)?.[1];
  });
  try {
    const address = await listening;
    return { address, ...(metricsAddress !== undefined && { metricsAddress }), dataDir, process: child, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Resolves with the address of the "dedupd listening on HOST:PORT" line `child` prints on stderr. */
export function waitForListening(child: ChildProcess, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let stderr = '';
    const timer = setTimeout(() => fail(`no "listening" line within ${timeoutMs} ms`), timeoutMs);
    function fail(why: string): void {
      clearTimeout(timer);
      reject(new Error(`dedupd did not start: ${why}\n${stderr}`));
    }
    child.once('error', (error) => fail(error.message));
    child.once('close', (code, signal) => fail(`exited (${code ?? signal})`));
    // Keep reading stderr for the server's whole life so it never blocks on a full pipe.
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-8192);
      const match = /dedupd listening on (\S+:\d+)/.exec(stderr);
      if (match?.[1] !== undefined) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
  });
}
