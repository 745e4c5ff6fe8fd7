// Slot routing against a sharded cluster (several Raft groups, each owning a
// range of the 16,384 slots; see proto/dedup/v1/dedup.proto, "Routing").
//
// A client fetches the cluster's shard map (dedup.v1.Cluster/ShardMap) from
// its current address before its first call. With a map, each call goes to
// its key's group: that group's last known leader, else one of its replicas;
// a batch is split per group and its answers merged back in order. A node
// that is not the leader still answers (it forwards), with the trailing
// metadata "dedup-leader" (the group's leader) and "dedup-shard-epoch" (the
// map's epoch): the leader becomes the group's guess, and an epoch higher
// than the map's makes the next call fetch the map again (at most once a
// second), as does a leader named at an address the map does not list.
//
// Without a map (a single node answers UNIMPLEMENTED: never asked again; any
// other failure: asked again 1 s later at the earliest, then 2, 4, ... up to
// 64 s after consecutive failures, so a node that hangs costs a call the
// fetch's deadline only now and then) every call goes exactly where it went
// before sharding (Endpoints).
import { fileURLToPath } from 'node:url';

import { type Client as GrpcClient, type Metadata, status as GrpcStatus } from '@grpc/grpc-js';
import type { MethodDefinition, PackageDefinition } from '@grpc/proto-loader';
import { loadSync } from '@grpc/proto-loader';

import type { Endpoints, Route } from './endpoints.js';
import { SLOT_COUNT, slotOf } from './slot.js';

export const EPOCH_METADATA_KEY = 'dedup-shard-epoch';
export const LEADER_METADATA_KEY = 'dedup-leader';
/** At most one map fetch per this many ms (an epoch seen rising, a leader outside the map, a failed fetch). */
export const REFRESH_INTERVAL_MS = 1000;
/** After consecutive failed fetches the interval doubles, up to this. */
export const MAX_FAILED_INTERVAL_MS = 64_000;
/** A fetch's deadline at most (the client's deadline when shorter): the map is an optimization. */
export const FETCH_TIMEOUT_MS = 2000;

// Copied next to dist/ by scripts/copy-repo-files.mjs from <repo>/proto.
const CLUSTER_PROTO_PATH = fileURLToPath(new URL('../../proto/dedup/v1/cluster.proto', import.meta.url));
export const CLUSTER_SERVICE_NAME = 'dedup.v1.Cluster';
const LOADER_OPTIONS = { keepCase: true, longs: String, enums: String, bytes: Buffer, defaults: true } as const;

let cached: PackageDefinition | undefined;

export function clusterPackageDefinition(): PackageDefinition {
  cached ??= loadSync(CLUSTER_PROTO_PATH, LOADER_OPTIONS);
  return cached;
}

export interface ShardMapResponseWire {
  epoch: string;
  slot_count: number;
  groups: {
    group_id: number;
    first_slot: number;
    end_slot: number;
    replicas: { node_id: string; client_address: string }[];
    leader_node_id: string;
    leader_address: string;
  }[];
}

export function shardMapMethod(): MethodDefinition<object, ShardMapResponseWire> {
  const service = clusterPackageDefinition()[CLUSTER_SERVICE_NAME] as Record<string, unknown> | undefined;
  return service?.['ShardMap'] as MethodDefinition<object, ShardMapResponseWire>;
}

/** One group of the map: slots [firstSlot, endSlot), its replicas' client addresses, the leader it named ("" if none). */
export interface ShardGroup {
  readonly groupId: number;
  readonly firstSlot: number;
  readonly endSlot: number;
  readonly replicas: readonly string[];
  readonly leader: string;
}

export interface ShardMap {
  readonly epoch: bigint;
  /** By firstSlot, covering [0, 16384) without gaps. */
  readonly groups: readonly ShardGroup[];
  /** Every replica's and leader's address. */
  readonly addresses: ReadonlySet<string>;
}

/** The map of a ShardMapResponse, or undefined when it cannot be routed by (another slot space, gaps, a group without addresses). */
export function shardMapFromWire(w: ShardMapResponseWire): ShardMap | undefined {
  if ((w.slot_count !== 0 && w.slot_count !== SLOT_COUNT) || w.groups.length === 0) return undefined;
  const groups: ShardGroup[] = [...w.groups]
    .sort((a, b) => a.first_slot - b.first_slot)
    .map((g) => ({
      groupId: g.group_id,
      firstSlot: g.first_slot,
      endSlot: g.end_slot,
      replicas: g.replicas.map((r) => r.client_address).filter((a) => a !== ''),
      leader: g.leader_address,
    }));
  let expected = 0;
  for (const g of groups) {
    if (g.firstSlot !== expected || g.endSlot <= g.firstSlot) return undefined;
    if (g.replicas.length === 0 && g.leader === '') return undefined;
    expected = g.endSlot;
  }
  if (expected !== SLOT_COUNT) return undefined;
  const addresses = new Set(groups.flatMap((g) => [...g.replicas, g.leader]).filter((a) => a !== ''));
  return { epoch: BigInt(w.epoch), groups, addresses };
}

function groupOfSlot(map: ShardMap, slot: number): ShardGroup {
  let lo = 0;
  let hi = map.groups.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if ((map.groups[mid] as ShardGroup).firstSlot <= slot) lo = mid;
    else hi = mid - 1;
  }
  return map.groups[lo] as ShardGroup;
}

/** The value of `key` in a call's metadata, or undefined. */
export function metadataValue(metadata: Metadata | undefined, key: string): string | undefined {
  const value = metadata?.get(key)[0];
  return value === undefined ? undefined : value.toString();
}

/** The map a client holds, each group's leader guess, and when to fetch the map again. */
export class ShardRouting {
  private map: ShardMap | undefined;
  private readonly leaders = new Map<number, string>();
  private disabled = false;
  private due = true;
  private fetching = false;
  private lastFetch = -Infinity;
  private intervalMs = REFRESH_INTERVAL_MS;
  /** Consecutive failed fetches. */
  private failures = 0;

  constructor(private readonly now: () => number = Date.now) {}

  get current(): ShardMap | undefined {
    return this.map;
  }

  /** Claims the fetch that is due (false: none due, or one in flight); the claimant reports fetched or fetchFailed. */
  startFetch(): boolean {
    if (this.disabled || !this.due || this.fetching) return false;
    if (this.now() - this.lastFetch < this.intervalMs) return false;
    this.fetching = true;
    this.due = false;
    this.lastFetch = this.now();
    return true;
  }

  fetched(w: ShardMapResponseWire): void {
    this.fetching = false;
    const map = shardMapFromWire(w);
    if (map === undefined) {
      this.due = true; // asked again later: maybe a map in transition
      return;
    }
    this.intervalMs = REFRESH_INTERVAL_MS;
    this.failures = 0;
    if (this.map !== undefined && map.epoch < this.map.epoch) return; // older than the one held
    this.map = map;
    this.leaders.clear();
    for (const g of map.groups) if (g.leader !== '') this.leaders.set(g.groupId, g.leader);
  }

  /** UNIMPLEMENTED (a single node, or a server from before sharding) is final; any other failure is asked again later. */
  fetchFailed(code: number | undefined): void {
    this.fetching = false;
    if (code === GrpcStatus.UNIMPLEMENTED && this.map === undefined) {
      this.disabled = true;
      return;
    }
    this.due = true;
    this.failures++;
    this.intervalMs = Math.min(REFRESH_INTERVAL_MS * 2 ** Math.min(this.failures - 1, 6), MAX_FAILED_INTERVAL_MS);
  }

  /** An answer carried dedup-shard-epoch `value`. */
  sawEpoch(value: string | undefined): void {
    if (this.map === undefined || value === undefined || !/^\d+$/.test(value)) return;
    if (BigInt(value) > this.map.epoch) this.due = true;
  }

  groupOf(namespace: string, key: string): ShardGroup | undefined {
    return this.map === undefined ? undefined : groupOfSlot(this.map, slotOf(namespace, key));
  }

  /** Where the group's calls go: its leader guess, else its first replica ("" if the map gives neither). */
  leader(group: ShardGroup): string {
    return this.leaders.get(group.groupId) || group.replicas[0] || '';
  }

  /** `address` answered as the group's leader, or was named as it. */
  follow(group: ShardGroup, address: string): void {
    this.leaders.set(group.groupId, address);
    if (this.map !== undefined && !this.map.addresses.has(address)) this.due = true; // the map is out of date
  }

  /** `address` did not answer for the group and named no leader: the guess moves on to its next replica. */
  failed(group: ShardGroup, address: string): void {
    const guess = this.leaders.get(group.groupId);
    if (guess !== undefined && guess !== address) return; // another call moved it already
    const i = group.replicas.indexOf(address);
    const next = group.replicas[(i + 1) % Math.max(1, group.replicas.length)];
    if (next === undefined) this.leaders.delete(group.groupId);
    else this.leaders.set(group.groupId, next);
  }

  /** With a map: the positions of `items` grouped by their key's group (each in order, groups by first item). */
  split(items: readonly { namespace: string; key: string }[]): number[][] | undefined {
    const map = this.map;
    if (map === undefined) return undefined;
    const parts = new Map<number, number[]>();
    items.forEach((item, i) => {
      const id = groupOfSlot(map, slotOf(item.namespace, item.key)).groupId;
      const part = parts.get(id);
      if (part === undefined) parts.set(id, [i]);
      else part.push(i);
    });
    return [...parts.values()];
  }
}

/**
 * The Endpoints as one group's calls see them (invoke's Route), on the same
 * channels; one per call. What it learns moves the Endpoints' own guess too,
 * so currentAddress still names the last node that answered as a leader
 * (with one group: the leader, as without a map), and a fetch goes to a live
 * node.
 */
export class GroupRoute implements Route {
  /** Where this call's latest attempt went (invoke opens its channel right before sending). */
  private sentTo: string | undefined;

  constructor(
    private readonly endpoints: Endpoints,
    private readonly routing: ShardRouting,
    readonly group: ShardGroup,
  ) {}

  get current(): string {
    return this.routing.leader(this.group) || this.endpoints.current;
  }

  channel(address: string): GrpcClient {
    this.sentTo = address;
    return this.endpoints.channel(address);
  }

  follow(leader: string): void {
    this.routing.follow(this.group, leader);
    this.endpoints.follow(leader);
  }

  failed(address: string): void {
    this.routing.failed(this.group, address);
    this.endpoints.failed(address);
  }

  /** An answer's or error's trailing metadata: who answered (answers only), its leader hint and epoch. */
  trailers(metadata: Metadata | undefined, answered: boolean): void {
    if (answered && this.sentTo !== undefined) this.follow(this.sentTo);
    const leader = metadataValue(metadata, LEADER_METADATA_KEY);
    if (answered && leader !== undefined && leader !== '') this.follow(leader);
    this.routing.sawEpoch(metadataValue(metadata, EPOCH_METADATA_KEY));
  }
}
