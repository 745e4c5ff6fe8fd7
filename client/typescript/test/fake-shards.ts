// In-process "nodes" of a sharded cluster, to pin how DedupClient routes by
// slot: each serves dedup.v1.Dedup (recording which keys reached it) and,
// unless told not to, dedup.v1.Cluster/ShardMap (a map the test sets). Every
// Dedup call is answered as the key's leader would: Begin STARTED with
// fence = the number in the key ("k7" -> 7), batches item by item the same
// way, so a test can tell each answer's item. `trailers` go on every answer
// (e.g. dedup-shard-epoch); `redirectTo` makes it answer UNAVAILABLE naming
// that leader instead. (The real multi-group dedupd is tested in
// tests/cluster.)
import {
  Metadata,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServiceDefinition,
  type sendUnaryData,
  status as GrpcStatus,
} from '@grpc/grpc-js';

import { CLUSTER_SERVICE_NAME, clusterPackageDefinition, type ShardMapResponseWire } from '../src/shard-map.js';
import { SLOT_COUNT, slotOf } from '../src/slot.js';
import * as wire from '../src/wire.js';
import { fenced, started } from './fake-dedupd.js';

export const NS = 'ts-client:shards';

export function fenceOf(key: string): number {
  const digits = key.replace(/\D/g, '');
  return digits === '' ? 1 : Number(digits);
}

type Item = { namespace: string; key: string; fence?: string };

export class ShardNode {
  map: ShardMapResponseWire | undefined;
  /** ShardMap answers this code instead of the map. */
  mapError: number | undefined;
  mapCalls = 0;
  trailers: Record<string, string> = {};
  /** When set: every Dedup call is answered UNAVAILABLE naming this leader. */
  redirectTo: string | undefined;
  readonly calls: { method: string; key: string }[] = [];
  /** The method of each RPC. */
  readonly rpcs: string[] = [];

  private constructor(
    private readonly server: Server,
    readonly address: string,
  ) {}

  /** serveMap false: no Cluster service (UNIMPLEMENTED, as a single dedupd answers). */
  static async start(serveMap = true): Promise<ShardNode> {
    const server = new Server();
    let node: ShardNode | undefined;
    const answer = (method: string, keys: string[], call: ServerUnaryCall<unknown, object>, response: object, cb: sendUnaryData<object>) => {
      const self = node as ShardNode;
      for (const key of keys) self.calls.push({ method, key });
      self.rpcs.push(method);
      const metadata = new Metadata();
      for (const [k, v] of Object.entries(self.trailers)) metadata.set(k, v);
      void call;
      if (self.redirectTo !== undefined) {
        metadata.set('dedup-leader', self.redirectTo);
        cb({ code: GrpcStatus.UNAVAILABLE, details: `not the leader: ${self.redirectTo}`, metadata });
        return;
      }
      cb(null, response, metadata);
    };
    const dedup = wire.packageDefinition()[wire.SERVICE_NAME] as ServiceDefinition;
    server.addService(dedup, {
      Begin: (call: ServerUnaryCall<Item, object>, cb: sendUnaryData<object>) =>
        answer('Begin', [call.request.key], call, started(fenceOf(call.request.key)), cb),
      Get: (call: ServerUnaryCall<Item, object>, cb: sendUnaryData<object>) =>
        answer('Get', [call.request.key], call, { found: false, record: null }, cb),
      BeginBatch: (call: ServerUnaryCall<{ items: Item[] }, object>, cb: sendUnaryData<object>) =>
        answer(
          'BeginBatch',
          call.request.items.map((i) => i.key),
          call,
          { items: call.request.items.map((i) => ({ response: started(fenceOf(i.key)) })) },
          cb,
        ),
      CompleteBatch: (call: ServerUnaryCall<{ items: Item[] }, object>, cb: sendUnaryData<object>) =>
        answer(
          'CompleteBatch',
          call.request.items.map((i) => i.key),
          call,
          { items: call.request.items.map((i) => ({ response: { ...fenced('OK', Number(i.fence)), expires_at: '2' } })) },
          cb,
        ),
    } as never);
    if (serveMap) {
      const cluster = clusterPackageDefinition()[CLUSTER_SERVICE_NAME] as ServiceDefinition;
      server.addService(cluster, {
        ShardMap: (_call: ServerUnaryCall<object, object>, cb: sendUnaryData<object>) => {
          const self = node as ShardNode;
          self.mapCalls++;
          if (self.mapError !== undefined || self.map === undefined) {
            cb({ code: self.mapError ?? GrpcStatus.UNAVAILABLE, details: 'no map' });
          } else {
            cb(null, self.map);
          }
        },
      } as never);
    }
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, p) => (error ? reject(error) : resolve(p))),
    );
    node = new ShardNode(server, `127.0.0.1:${port}`);
    return node;
  }

  keys(method: string): string[] {
    return this.calls.filter((c) => c.method === method).map((c) => c.key);
  }

  stop(): void {
    this.server.forceShutdown();
  }
}

/** leaders.length groups splitting the slots evenly; group g led by leaders[g], replicas `replicas` (default: its leader). */
export function shardMap(epoch: number, leaders: readonly string[], replicas?: readonly string[]): ShardMapResponseWire {
  const n = leaders.length;
  return {
    epoch: String(epoch),
    slot_count: SLOT_COUNT,
    groups: leaders.map((leader, g) => ({
      group_id: g,
      first_slot: Math.floor((g * SLOT_COUNT) / n),
      end_slot: Math.floor(((g + 1) * SLOT_COUNT) / n),
      replicas: (replicas ?? [leader]).map((address, i) => ({ node_id: String(i + 1), client_address: address })),
      leader_node_id: String(g + 1),
      leader_address: leader,
    })),
  };
}

/** The group (of `groups` even ranges) of NS/key. */
export function groupOf(key: string, groups: number): number {
  const slot = slotOf(NS, key);
  for (let g = 0; g < groups; g++) if (slot < Math.floor(((g + 1) * SLOT_COUNT) / groups)) return g;
  return groups - 1;
}

/** Keys "k1", "k2", ... until each group has perGroup of them, in the order found (groups interleave). */
export function keysPerGroup(groups: number, perGroup: number): string[] {
  const counts = new Array<number>(groups).fill(0);
  const keys: string[] = [];
  for (let i = 1; Math.min(...counts) < perGroup; i++) {
    const key = `k${i}`;
    const g = groupOf(key, groups);
    if ((counts[g] as number) < perGroup) {
      counts[g] = (counts[g] as number) + 1;
      keys.push(key);
    }
  }
  return keys;
}

export function keyIn(group: number, groups: number): string {
  return keysPerGroup(groups, 1).find((k) => groupOf(k, groups) === group) as string;
}
