// Starts a real dedupd for integration and end-to-end tests (exported as
// @dedup/client/testing so the MCP example's tests share it). Not for
// production use. A started dedupd is known to serve, and where, by its
// --ready_file: a JSON file it writes atomically once serving, with its pid
// and every bound address (server/ready_file.h in the dedup repository).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface DedupdOptions {
  /** Extra flags, e.g. ['--min_lease_ms=100']. */
  readonly args?: readonly string[];
  /** Default: env DEDUPD, else <repo>/build/server/dedupd. */
  readonly binary?: string;
  /** How long to wait for dedupd's ready file (ms). Default 15000. */
  readonly startTimeoutMs?: number;
  /** Serve Prometheus /metrics on a free port (`Dedupd.metricsAddress`). Default false. */
  readonly metrics?: boolean;
}

/** What dedupd writes to its --ready_file once serving (keys may be added). */
export interface ReadyInfo {
  readonly pid: number;
  readonly mode: 'single' | 'cluster';
  /** The bound gRPC address, "HOST:PORT". */
  readonly address: string;
  /** The bound /metrics address, or "" without metrics. */
  readonly metrics_address: string;
  readonly health_address: string;
  readonly raft_address: string;
  readonly [key: string]: unknown;
}

export interface Dedupd {
  /** "127.0.0.1:PORT", from dedupd's ready file. */
  readonly address: string;
  /** "127.0.0.1:PORT" of /metrics, with the `metrics` option. */
  readonly metricsAddress?: string;
  /** The data directory, in a temp dir of its own (removed by `stop`). */
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
  // The ready file beside the data dir, not in it.
  const root = mkdtempSync(join(tmpdir(), 'dedupd-test-'));
  const dataDir = join(root, 'data');
  const readyFile = join(root, 'ready.json');
  const child = spawn(
    options.binary ?? dedupdBinary(),
    [
      '--address=127.0.0.1:0',
      `--data_dir=${dataDir}`,
      '--durability=none',
      `--ready_file=${readyFile}`,
      ...extraFlags,
      ...(options.args ?? []),
    ],
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
      rmSync(root, { recursive: true, force: true });
    })();
    return stopping;
  };

  try {
    const ready = await waitForReady(child, readyFile, options.startTimeoutMs ?? 15_000);
    const metricsAddress = ready.metrics_address !== '' ? ready.metrics_address : undefined;
    return { address: ready.address, ...(metricsAddress !== undefined && { metricsAddress }), dataDir, process: child, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Resolves with the contents of the ready file `child` (a dedupd started with
 * `--ready_file=<readyFile>`; delete an older file there first) writes once
 * serving: polled until it holds the child's pid. Rejects, with the tail of
 * the child's stderr, if the child exits first or after `timeoutMs`.
 */
export function waitForReady(child: ChildProcess, readyFile: string, timeoutMs: number): Promise<ReadyInfo> {
  return new Promise((resolve, reject) => {
    let stderr = '';
    let done = false;
    const deadline = Date.now() + timeoutMs;
    function fail(why: string): void {
      if (done) return;
      done = true;
      reject(new Error(`dedupd did not start: ${why}\n${stderr}`));
    }
    child.once('error', (error) => fail(error.message));
    child.once('close', (code, signal) => fail(`exited (${code ?? signal})`));
    // Keep reading stderr for the server's whole life so it never blocks on a full pipe.
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-8192);
    });
    const poll = (): void => {
      if (done) return;
      const ready = readReadyFile(readyFile);
      if (ready !== undefined && ready.pid === child.pid) {
        done = true;
        resolve(ready);
      } else if (Date.now() >= deadline) {
        fail(`no ready file (${readyFile}) within ${timeoutMs} ms`);
      } else {
        setTimeout(poll, 10);
      }
    };
    poll();
  });
}

/**
 * Resolves with the gRPC address dedupd `child` serves on, once it serves:
 * read from the ready file named by the `--ready_file=` flag it was started
 * with (required). Rejects as `waitForReady` does.
 */
export async function waitForListening(child: ChildProcess, timeoutMs: number): Promise<string> {
  const flag = child.spawnargs.filter((arg) => arg.startsWith('--ready_file=')).pop();
  if (flag === undefined) throw new Error('dedupd was started without --ready_file=PATH');
  return (await waitForReady(child, flag.slice('--ready_file='.length), timeoutMs)).address;
}

/** The ready file's contents; undefined while there is none (written by rename: never partial). */
function readReadyFile(path: string): ReadyInfo | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
  return JSON.parse(text) as ReadyInfo;
}
