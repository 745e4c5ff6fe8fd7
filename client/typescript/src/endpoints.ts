// Endpoints: the dedupd addresses a client may call, one gRPC channel per
// address (created on first use and kept), and which one calls go to first.
// In a replicated group only the leader answers, so that is the last leader
// a follower named, or else the next address of the list after one that
// failed. With one address this is simply that address.
import { type ChannelCredentials, Client as GrpcClient, type ClientOptions } from '@grpc/grpc-js';

/**
 * The addresses of `address` (one host:port, or several separated by commas)
 * and `addresses`, in order, without duplicates. Throws TypeError when there
 * is none.
 */
export function parseAddresses(address: string | undefined, addresses: readonly string[] | undefined): string[] {
  const all = [...(address === undefined ? [] : [address]), ...(addresses ?? [])]
    .flatMap((a) => a.split(','))
    .map((a) => a.trim())
    .filter((a) => a !== '');
  const unique = [...new Set(all)];
  if (unique.length === 0) throw new TypeError('DedupClient: give `address` (host:port[,host:port...]) or `addresses`');
  return unique;
}

/** Where one call goes and what it learns (failover.ts): the Endpoints, or a shard group's view of them. */
export interface Route {
  /** Where the next attempt goes. */
  readonly current: string;
  channel(address: string): GrpcClient;
  follow(leader: string): void;
  failed(address: string): void;
}

export class Endpoints implements Route {
  private readonly channels = new Map<string, GrpcClient>();
  /** Position in `list` of the address last chosen from it. */
  private index = 0;
  private target: string;
  private closed = false;

  constructor(
    private readonly list: readonly string[],
    private readonly credentials: ChannelCredentials,
    /** Channel options and interceptors (the bearer token's) of every channel. */
    private readonly channelOptions: ClientOptions,
    /** Throws for an address this client must not call (a token in plaintext off loopback). */
    private readonly guard: (address: string) => void = () => {},
  ) {
    const first = list[0];
    if (first === undefined) throw new TypeError('Endpoints: no address');
    this.target = first;
    // Now rather than on first use, so a malformed (or, for a token in
    // plaintext, a remote) address fails here.
    for (const address of list) this.channel(address);
  }

  /** Where the next call goes: the last known leader, or the list's current address. */
  get current(): string {
    return this.target;
  }

  /** The channel to `address`, created on first use (a leader may be outside the list). */
  channel(address: string): GrpcClient {
    let channel = this.channels.get(address);
    if (channel === undefined) {
      // A closed client must not open new connections behind the caller's back.
      if (this.closed) throw new Error('DedupClient is closed');
      this.guard(address);
      channel = new GrpcClient(address, this.credentials, this.channelOptions);
      this.channels.set(address, channel);
    }
    return channel;
  }

  /** A follower named `leader`: later calls go there. */
  follow(leader: string): void {
    this.target = leader;
    const i = this.list.indexOf(leader);
    if (i >= 0) this.index = i;
  }

  /**
   * A call to `address` failed without naming a leader (unreachable, no
   * leader yet, too slow): later calls go to the list's next address. Does
   * nothing when another call already moved on from `address`, so concurrent
   * failures do not skip addresses.
   */
  failed(address: string): void {
    if (this.target !== address) return;
    const i = this.list.indexOf(address);
    this.index = ((i >= 0 ? i : this.index) + 1) % this.list.length;
    this.target = this.list[this.index] ?? address;
  }

  /** Closes every channel; calls in progress fail. */
  close(): void {
    this.closed = true;
    for (const channel of this.channels.values()) channel.close();
  }
}
