// Starts a real replicated dedupd group (cluster mode, one process per node on
// 127.0.0.N with free ports and temp data dirs) for integration tests, and
// stops every process it started by its PID. Each node writes its own ready
// file (--ready_file, beside its data dir) once serving; start waits for all
// of them. Not for production use.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client as GrpcClient, credentials, Metadata, type ServiceError } from '@grpc/grpc-js';

import * as wire from '../wire.js';
import { dedupdBinary, killOnExit, waitForReady } from './dedupd.js';

export interface DedupdGroupOptions {
  /** Nodes, at most 254 (one loopback IP each). Default 3. */
  readonly size?: number;
  /** Extra flags for every node. */
  readonly args?: readonly string[];
  /** Default: env DEDUPD, else <repo>/build/server/dedupd. */
  readonly binary?: string;
  /** How long to wait for each node's ready file (ms). Default 15000. */
  readonly startTimeoutMs?: number;
}

export interface GroupNode {
  /** 1..size */
  readonly id: number;
  /** Client address, 127.0.0.<id>:PORT: what followers name as the leader's. */
  readonly address: string;
  readonly raftAddress: string;
  readonly dataDir: string;
  /** The running process; undefined once killed or stopped. */
  process: ChildProcess | undefined;
  exited: Promise<void>;
}

export interface DedupdGroup {
  readonly nodes: readonly GroupNode[];
  /** Every node's client address, in node order. */
  readonly addresses: string[];
  /**
   * Polls until exactly one running node serves Dedup calls (a Get
   * answered OK; followers answer UNAVAILABLE) and returns it.
   * `exclude`: a node known to be gone or deposed.
   */
  waitForLeader(timeoutMs?: number, exclude?: number): Promise<GroupNode>;
  /** Sends `signal` (default SIGKILL) to node `id` by its PID and waits for it to exit. */
  kill(id: number, signal?: NodeJS.Signals): Promise<void>;
  /** SIGTERM to every running node (SIGKILL after 5 s), then removes the data dirs. Idempotent. */
  stop(): Promise<void>;
}

export async function startDedupdGroup(options: DedupdGroupOptions = {}): Promise<DedupdGroup> {
  const size = options.size ?? 3;
  const root = mkdtempSync(join(tmpdir(), 'dedupd-group-'));
  const layout: { id: number; ip: string; address: string; raftAddress: string; dataDir: string; readyFile: string }[] = [];
  for (let id = 1; id <= size; id++) {
    const ip = `127.0.0.${id}`;
    layout.push({
      id,
      ip,
      address: `${ip}:${await freePort(ip)}`,
      raftAddress: `${ip}:${await freePort(ip)}`,
      dataDir: join(root, `n${id}`),
      readyFile: join(root, `n${id}.ready.json`),
    });
  }
  const peers = layout.map((n) => `${n.id}=${n.raftAddress}=${n.address}`).join(',');
  const nodes: GroupNode[] = [];
  let stopping: Promise<void> | undefined;
  const group: DedupdGroup = {
    nodes,
    addresses: layout.map((n) => n.address),
    waitForLeader: (timeoutMs = 20_000, exclude) => waitForLeader(nodes, timeoutMs, exclude),
    kill: async (id, signal = 'SIGKILL') => {
      const node = nodes[id - 1];
      const child = node?.process;
      if (node === undefined || child === undefined) return;
      if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) process.kill(child.pid, signal);
      await node.exited;
      node.process = undefined;
    },
    stop: () => {
      stopping ??= (async () => {
        await Promise.all(nodes.map((n) => stopNode(n)));
        rmSync(root, { recursive: true, force: true });
      })();
      return stopping;
    },
  };

  try {
    for (const n of layout) {
      const child = spawn(
        options.binary ?? dedupdBinary(),
        [
          `--node_id=${n.id}`,
          `--peers=${peers}`,
          `--address=${n.address}`,
          `--data_dir=${n.dataDir}`,
          '--event_log=off',
          // The default metrics port would collide between the nodes.
          '--metrics_address=',
          `--ready_file=${n.readyFile}`,
          ...(options.args ?? []),
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      nodes.push({
        id: n.id,
        address: n.address,
        raftAddress: n.raftAddress,
        dataDir: n.dataDir,
        process: child,
        exited: killOnExit(child),
      });
    }
    await Promise.all(
      nodes.map(async (n, i) => {
        const ready = await waitForReady(n.process as ChildProcess, layout[i]?.readyFile ?? '', options.startTimeoutMs ?? 15_000);
        if (ready.address !== n.address) throw new Error(`node ${n.id} serves on ${ready.address}, not ${n.address}`);
      }),
    );
    return group;
  } catch (error) {
    await group.stop();
    throw error;
  }
}

async function stopNode(node: GroupNode): Promise<void> {
  const child = node.process;
  if (child === undefined) return;
  if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
    process.kill(child.pid, 'SIGTERM');
    const timer = setTimeout(() => {
      if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) process.kill(child.pid, 'SIGKILL');
    }, 5000);
    await node.exited;
    clearTimeout(timer);
  }
  node.process = undefined;
}

async function waitForLeader(nodes: readonly GroupNode[], timeoutMs: number, exclude?: number): Promise<GroupNode> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    const running = nodes.filter((n) => n.process !== undefined && n.id !== exclude);
    const serving = await Promise.all(running.map((n) => servesDedup(n.address)));
    const leaders = running.filter((_, i) => serving[i] === true);
    if (leaders.length === 1 && leaders[0] !== undefined) return leaders[0];
    last = serving.map((s, i) => `node ${running[i]?.id}: ${s === true ? 'leader' : s}`).join('; ');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no single leader within ${timeoutMs} ms (${last})`);
}

/** true when `address` answers a Get (only the leader does), else why not. */
function servesDedup(address: string): Promise<true | string> {
  const method = wire.methodDefinition<wire.KeyRequestWire, wire.GetResponseWire>('Get');
  const channel = new GrpcClient(address, credentials.createInsecure());
  return new Promise<true | string>((resolve) => {
    channel.makeUnaryRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      { namespace: 'cluster-probe', key: 'probe' },
      new Metadata(),
      { deadline: Date.now() + 1000 },
      (error: ServiceError | null) => resolve(error === null ? true : error.details),
    );
  }).finally(() => channel.close());
}

function freePort(host: string): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, host, () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
}
