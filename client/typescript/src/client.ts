// DedupClient: typed, promise-based calls to dedup.v1.Dedup, on one dedupd
// or a replicated group (following its leader), with a deadline on every
// attempt, retries on UNAVAILABLE, and safe retries of operations whose
// outcome is unknown.
import {
  type ChannelCredentials,
  type ChannelOptions,
  type Client as GrpcClient,
  Metadata,
  type ServiceError,
  status as GrpcStatus,
  type StatusObject,
} from '@grpc/grpc-js';

import { type BackoffOptions, DEFAULT_BACKOFF } from './backoff.js';
import { sendWithItemRetries } from './batch-retry.js';
import { type CoalesceOptions, Coalescer } from './coalescer.js';
import { environmentDefaults } from './environment.js';
import { Endpoints, parseAddresses, type Route } from './endpoints.js';
import { DedupRpcError, isOutcomeUnknown } from './errors.js';
import { type FailoverPolicy, type Invoked, invoke, type OnUnknownOutcome } from './failover.js';
import {
  type IdempotencyOptions,
  type IdempotencyResult,
  type IdempotentFunction,
  withIdempotency,
} from './idempotency.js';
import { sleep } from './retry.js';
import { isWithoutBatchMethod, itemError, parseable, renumbered, rpcError } from './rpc-answers.js';
import { channelSecurity, type SecurityOptions } from './security.js';
import {
  FETCH_TIMEOUT_MS,
  GroupRoute,
  type ShardMap,
  type ShardMapResponseWire,
  ShardRouting,
  shardMapMethod,
} from './shard-map.js';
import type {
  BatchItemResult,
  BeginBatchItem,
  BeginRequest,
  BeginResponse,
  CallOptions,
  CheckpointBatchItem,
  CheckpointRequest,
  CheckpointResponse,
  CompleteBatchItem,
  CompleteRequest,
  CompleteResponse,
  ForgetResponse,
  GetResponse,
  KeyRequest,
  ReleaseRequest,
  ReleaseResponse,
  RenewRequest,
  RenewResponse,
} from './types.js';
import * as wire from './wire.js';

/**
 * Security (SecurityOptions, see security.ts): `tls` (root CA, client
 * certificate and key for mTLS, server name override; or true for the
 * system's roots), `token` / `tokenFile` (sent as `authorization: Bearer
 * <token>` on every call, batches and leader redirects included). Without
 * TLS a token goes only to loopback addresses unless `allowInsecureToken`.
 */
export interface DedupClientOptions extends SecurityOptions {
  /**
   * host:port of dedupd, e.g. "127.0.0.1:50051", or of every node of a
   * replicated group separated by commas ("10.0.0.1:50051,10.0.0.2:50051,...").
   */
  readonly address?: string;
  /** The nodes of a replicated group (instead of, or added to, `address`). Calls go to the leader. */
  readonly addresses?: readonly string[];
  /**
   * Custom channel credentials (not with `tls`, which builds them). Default:
   * plaintext, or TLS when `tls` is given.
   */
  readonly credentials?: ChannelCredentials;
  readonly channelOptions?: ChannelOptions;
  /** Deadline of each attempt in ms; Begin adds its waitMs. Default 5000. */
  readonly deadlineMs?: number;
  /**
   * Attempts per call counting the first; UNAVAILABLE and unknown outcomes
   * (where a retry is safe) are retried. Default 5 for one address, 10 for
   * several (a replicated group: the retries then span a leader election,
   * about 1-2 s, with room to spare).
   */
  readonly maxAttempts?: number;
  /** Redirects to the leader a follower names, followed at once within one attempt. Default 3. */
  readonly maxRedirects?: number;
  /** Delay before retry n is random(0, min(capMs, baseMs * 2^n)). Default base 50 ms, cap 2 s. */
  readonly backoff?: BackoffOptions;
  /** Uniform in [0, 1). Injectable for tests; default Math.random. */
  readonly random?: () => number;
  /** Injectable for tests; default setTimeout. */
  readonly sleep?: (ms: number) => Promise<void>;
  /**
   * Send concurrent begin (without waitMs), complete and checkpoint calls
   * as BeginBatch/CompleteBatch/CheckpointBatch RPCs: calls made while a
   * batch is on the wire leave together, a lone call leaves at once. Each
   * caller still gets the answer or DedupRpcError its unary call would have
   * (a failed batch RPC: its code and details, method
   * "Begin"/"Complete"/"Checkpoint", the batch's error as `cause`). Give
   * each begin an owner: a batch refused as too large is re-sent item by
   * item, and an anonymous Begin the server had applied would then answer
   * IN_USE. Worth it for a process serving many calls at once (an MCP
   * server running tool calls in parallel): the server's per-RPC cost, not
   * its storage, bounds unary throughput. Calls given per-call options go alone. A server without
   * CheckpointBatch (older than it; see isWithoutBatchMethod) gets this
   * client's checkpoints as unary calls from then on. Default off.
   */
  readonly coalesce?: boolean | CoalesceOptions;
}

/**
 * Connections to dedupd (one node, or every node of a replicated group), safe
 * to share by every request of a process. Every method resolves with the
 * server's answer, which may be any answer status (IN_USE, STALE_FENCE, ...
 * are answers, not errors), and rejects with DedupRpcError for gRPC errors;
 * `outcomeUnknown` on it means the operation may have taken effect.
 *
 * In a group, calls go to the last leader a follower named (UNAVAILABLE with
 * trailing metadata `dedup-leader`: the attempt follows it at once), else to
 * the next address after one that failed. An attempt whose outcome is
 * unknown (ABORTED with `dedup-outcome: unknown`) is retried the safe way:
 * Begin with the same owner (re-entrant), Complete with the same fence,
 * outcome and result, Renew, Checkpoint and Get as they are, Release too (a
 * retry that finds the claim gone reports it released: OK). Not retried after an
 * unknown outcome: a Begin without an owner (it could not re-enter its
 * claim) and Forget (a retry could not tell whether the record existed).
 *
 * A tenant over its limits is refused with RESOURCE_EXHAUSTED carrying a
 * RetryInfo: while attempts remain the call (a batch: whole) waits exactly
 * that delay (capped at 30 s, no jitter added) and goes again, as an
 * attempt; then it rejects with the server's message (`retryDelayMs` set).
 * RESOURCE_EXHAUSTED without RetryInfo is not retried.
 *
 * A sharded cluster (several Raft groups; see shard-map.ts): before its
 * first call the client asks its current address for the shard map
 * (dedup.v1.Cluster/ShardMap); with one, each call goes straight to its key's
 * group's leader (redirects, retries and the leader guess are then the
 * group's), and a batch is split into one RPC per group, its answers merged
 * back in item order (no atomicity across groups). A single node answers
 * UNIMPLEMENTED, and any failure leaves the calls routed as above.
 *
 * UNAUTHENTICATED (no or an unknown credential) and PERMISSION_DENIED (a
 * namespace outside the tenant's, Forget without the operator role) are
 * answers: never retried, they reject at once with their code. In a batch a
 * foreign namespace refuses only its item. A failed TLS handshake is
 * UNAVAILABLE, retried like any other.
 */
export class DedupClient {
  private readonly endpoints: Endpoints;
  private readonly deadlineMs: number;
  private readonly retryPolicy: FailoverPolicy;
  private readonly begins?: Coalescer<wire.BeginRequestWire, BeginResponse>;
  private readonly completes?: Coalescer<wire.CompleteRequestWire, CompleteResponse>;
  private readonly checkpoints?: Coalescer<wire.CheckpointRequestWire, CheckpointResponse>;
  /**
   * A server refused a parseable CheckpointBatch as a method it does not
   * have (a dedupd older than it): checkpoints go unary from then on rather
   * than paying that refusal on every batch.
   */
  private checkpointBatchUnimplemented = false;
  private readonly shards = new ShardRouting();
  /** The shard map fetch in flight: the calls made meanwhile wait for it. */
  private mapFetch: Promise<void> | undefined;

  /**
   * What `options` leave open comes from the DEDUP_* environment variables
   * (environment.ts): DEDUP_ADDRESS, DEDUP_CA_FILE / DEDUP_CERT_FILE /
   * DEDUP_KEY_FILE, DEDUP_TOKEN_FILE. An explicit option always wins.
   */
  constructor(explicit: DedupClientOptions = {}) {
    const options = environmentDefaults(explicit);
    const addresses = parseAddresses(options.address, options.addresses);
    const security = channelSecurity(options);
    this.endpoints = new Endpoints(addresses, security.credentials, security.options, security.guard);
    this.deadlineMs = options.deadlineMs ?? 5000;
    this.retryPolicy = {
      maxAttempts: options.maxAttempts ?? (addresses.length > 1 ? 10 : 5),
      maxRedirects: options.maxRedirects ?? 3,
      backoff: options.backoff ?? DEFAULT_BACKOFF,
      random: options.random ?? Math.random,
      sleep: options.sleep ?? sleep,
    };
    if (options.coalesce !== undefined && options.coalesce !== false) {
      const coalesce = options.coalesce === true ? {} : options.coalesce;
      const wireBytes = (item: { namespace: string; key: string }, payload: Uint8Array) =>
        item.namespace.length + item.key.length + payload.length + 64;
      this.begins = new Coalescer('Begin', (items) => this.sendBeginBatch(items), (i) => wireBytes(i, i.args_hash), coalesce);
      this.completes = new Coalescer(
        'Complete',
        (items) => this.sendCompleteBatch(items),
        (i) => wireBytes(i, i.result),
        coalesce,
      );
      // Up to 64 KiB of data each: the coalescer's byte cap (3 MiB) keeps a
      // batch of them under the 4 MiB message limit.
      this.checkpoints = new Coalescer(
        'Checkpoint',
        (items) => this.sendCheckpointBatch(items),
        (i) => wireBytes(i, i.data) + i.step.length,
        coalesce,
      );
    }
  }

  /** Claims (namespace, key), or reports who holds it or what it produced. */
  async begin(request: BeginRequest, options?: CallOptions): Promise<BeginResponse> {
    const req = wire.beginRequestToWire(request);
    if (this.begins !== undefined && req.wait_ms === 0 && options === undefined) return this.begins.submit(req);
    // The server may legitimately hold a Begin for wait_ms before answering.
    // Only a Begin with an owner re-enters its claim when sent again.
    const onUnknown = req.owner !== '' ? 'retry' : 'fail';
    const res = await this.call<wire.BeginRequestWire, wire.BeginResponseWire>('Begin', req, options, req.wait_ms, onUnknown);
    return wire.beginResponseFromWire(res.value);
  }

  /** Records the outcome of the execution holding `fence`. */
  async complete(request: CompleteRequest, options?: CallOptions): Promise<CompleteResponse> {
    const req = wire.completeRequestToWire(request);
    if (this.completes !== undefined && options === undefined) return this.completes.submit(req);
    const res = await this.call<wire.CompleteRequestWire, wire.CompleteResponseWire>('Complete', req, options);
    return wire.completeResponseFromWire(res.value);
  }

  /**
   * Gives a claim back when its side effect certainly did not happen. When an
   * attempt's outcome was unknown and the retry finds no claim (NOT_FOUND),
   * that attempt released it: the answer is OK.
   */
  async release(request: ReleaseRequest, options?: CallOptions): Promise<ReleaseResponse> {
    const req = wire.releaseRequestToWire(request);
    const res = await this.call<wire.ReleaseRequestWire, wire.ReleaseResponseWire>('Release', req, options);
    const answer = wire.releaseResponseFromWire(res.value);
    return res.afterUnknownOutcome && answer.status === 'NOT_FOUND' ? { ...answer, status: 'OK' } : answer;
  }

  /** Extends the lease of the execution holding `fence`. */
  async renew(request: RenewRequest, options?: CallOptions): Promise<RenewResponse> {
    const req = wire.renewRequestToWire(request);
    const res = await this.call<wire.RenewRequestWire, wire.RenewResponseWire>('Renew', req, options);
    return wire.renewResponseFromWire(res.value);
  }

  /**
   * Records the progress of the execution holding `fence` (a step name and
   * up to 64 KiB of data); whoever takes the execution over, or the same
   * owner re-entering, gets it as BeginResponse.checkpoint. With `leaseMs`
   * it also renews the lease. STALE_FENCE, NOT_FOUND or ALREADY_COMPLETED:
   * nothing was recorded and the claim is lost. Retried like Renew after an
   * unknown outcome (the same checkpoint again is harmless). With `coalesce`
   * concurrent checkpoints leave as CheckpointBatch RPCs (unary once a
   * server turned out not to have it). A server older than Checkpoint
   * rejects with UNIMPLEMENTED.
   */
  async checkpoint(request: CheckpointRequest, options?: CallOptions): Promise<CheckpointResponse> {
    const req = wire.checkpointRequestToWire(request);
    if (this.checkpoints !== undefined && options === undefined && !this.checkpointBatchUnimplemented) {
      return this.checkpoints.submit(req);
    }
    return this.unaryCheckpoint(req, options);
  }

  /** Reads a record without changing it. */
  async get(request: KeyRequest, options?: CallOptions): Promise<GetResponse> {
    const req = wire.keyRequestToWire(request);
    const res = await this.call<wire.KeyRequestWire, wire.GetResponseWire>('Get', req, options);
    return wire.getResponseFromWire(res.value);
  }

  /**
   * Removes a record (administration). Not retried after an unknown outcome
   * (a retry's `existed` could not be trusted): rejects with `outcomeUnknown`.
   */
  async forget(request: KeyRequest, options?: CallOptions): Promise<ForgetResponse> {
    const req = wire.keyRequestToWire(request);
    const res = await this.call<wire.KeyRequestWire, wire.ForgetResponseWire>('Forget', req, options, 0, 'fail');
    return wire.forgetResponseFromWire(res.value);
  }

  /**
   * Up to 1000 (the server's --max_batch_items) independent Begins in one
   * call: one result per item, in order. Rejects (e.g. INVALID_ARGUMENT
   * "items: ...") only when the batch as a whole is refused (empty or too
   * large) or the RPC fails, and then nothing was done for any item. Retried
   * like begin: every attempt re-sends each item with its owner, so give each
   * item its own owner and an item claimed by an attempt whose answer was lost
   * is re-entered (STARTED, same fence) rather than answered IN_USE. Anonymous
   * items cannot re-enter. Items refused with UNAVAILABLE, or with ABORTED
   * (outcome unknown) where they have an owner, are sent again on their own
   * (up to maxAttempts rounds); one whose outcome stays unknown gets an error
   * result with `outcomeUnknown: true`.
   */
  async beginBatch(items: readonly BeginBatchItem[], options?: CallOptions): Promise<BatchItemResult<BeginResponse>[]> {
    return this.sendBeginBatch(wire.beginBatchRequestToWire(items).items, options);
  }

  /**
   * Up to 1000 independent Completes in one call, answered and retried like
   * beginBatch. Safe to retry, items included: Complete is idempotent.
   */
  async completeBatch(
    items: readonly CompleteBatchItem[],
    options?: CallOptions,
  ): Promise<BatchItemResult<CompleteResponse>[]> {
    return this.sendCompleteBatch(wire.completeBatchRequestToWire(items).items, options);
  }

  /**
   * Up to 1000 independent Checkpoints in one call, answered and retried like
   * completeBatch (re-sending a checkpoint with the same fence, step and data
   * is harmless). A server without CheckpointBatch gets the items as unary
   * Checkpoints, at once and from then on; an item refused there carries the
   * unary call's message (no "items[i]." prefix). So does a batch the server
   * could not parse (a string with a lone surrogate: not UTF-8), without the
   * "from then on".
   */
  async checkpointBatch(
    items: readonly CheckpointBatchItem[],
    options?: CallOptions,
  ): Promise<BatchItemResult<CheckpointResponse>[]> {
    return this.sendCheckpointBatch(wire.checkpointBatchRequestToWire(items).items, options);
  }

  /** Runs `fn` at most once per key; see withIdempotency in idempotency.ts. */
  withIdempotency<T>(options: IdempotencyOptions, fn: IdempotentFunction<T>): Promise<IdempotencyResult<T>> {
    return withIdempotency(this, options, fn);
  }

  /**
   * Where calls go first: the last leader a follower named, else the address
   * tried last (with one address, that address).
   */
  get currentAddress(): string {
    return this.endpoints.current;
  }

  /** The cluster's shard map calls are routed by (undefined: calls go to currentAddress, as to a single group). */
  get shardMap(): ShardMap | undefined {
    return this.shards.current;
  }

  /** Closes every channel; calls in progress fail. */
  close(): void {
    this.endpoints.close();
  }

  private sendBeginBatch(items: wire.BeginRequestWire[], options?: CallOptions): Promise<BatchItemResult<BeginResponse>[]> {
    return sendWithItemRetries(
      this.retryPolicy,
      items,
      (item) => item.owner !== '',
      (subset) =>
        this.splitSend(subset, async (part) => {
          // No extra deadline: batch items never wait.
          const res = await this.call<wire.BeginBatchRequestWire, wire.BeginBatchResponseWire>(
            'BeginBatch',
            { items: part },
            options,
            0,
            'fail',
          );
          return wire.beginBatchResponseFromWire(res.value, part.length);
        }),
    );
  }

  private sendCompleteBatch(
    items: wire.CompleteRequestWire[],
    options?: CallOptions,
  ): Promise<BatchItemResult<CompleteResponse>[]> {
    return sendWithItemRetries(
      this.retryPolicy,
      items,
      () => true,
      (subset) =>
        this.splitSend(subset, async (part) => {
          const res = await this.call<wire.CompleteBatchRequestWire, wire.CompleteBatchResponseWire>(
            'CompleteBatch',
            { items: part },
            options,
            0,
            'fail',
          );
          return wire.completeBatchResponseFromWire(res.value, part.length);
        }),
    );
  }

  private async sendCheckpointBatch(
    items: wire.CheckpointRequestWire[],
    options?: CallOptions,
  ): Promise<BatchItemResult<CheckpointResponse>[]> {
    if (this.checkpointBatchUnimplemented) return this.checkpointOneByOne(items, options);
    // Items a server refused as a batch it cannot take (below): nothing was
    // done for them, and they go as unary calls.
    const unbatched = new Set<wire.CheckpointRequestWire>();
    const results = await sendWithItemRetries(
      this.retryPolicy,
      items,
      () => true,
      (whole) =>
        this.splitSend(whole, async (subset): Promise<BatchItemResult<CheckpointResponse>[]> => {
          try {
            const res = await this.call<wire.CheckpointBatchRequestWire, wire.CheckpointBatchResponseWire>(
              'CheckpointBatch',
              { items: subset },
              options,
              0,
              'fail',
            );
            return wire.checkpointBatchResponseFromWire(res.value, subset.length);
          } catch (error) {
            if (!isWithoutBatchMethod(error)) throw error;
            // Final item results, not a rejection, so that a retry round
            // meeting an older node (a group being upgraded) is handled like
            // the first RPC. Remembered only when the server could have parsed
            // the request: then the method is missing, whereas one caller's
            // malformed key must not end batching for all.
            if (subset.every(parseable)) this.checkpointBatchUnimplemented = true;
            for (const item of subset) unbatched.add(item);
            return subset.map(() => ({ ok: false as const, code: error.code, message: error.details }));
          }
        }),
    );
    // Re-sent even where an earlier round's outcome was unknown: the same
    // checkpoint again is harmless, and its answer settles the item.
    const unary = items.flatMap((item, i) => (unbatched.has(item) ? [i] : []));
    if (unary.length === 0) return results;
    const answers = await this.checkpointOneByOne(
      unary.map((i) => items[i] as wire.CheckpointRequestWire),
      options,
    );
    unary.forEach((i, j) => {
      results[i] = answers[j] as BatchItemResult<CheckpointResponse>;
    });
    return results;
  }

  /** Each item as a unary Checkpoint (with its own retries), at once; its answer or error as the item's result. */
  private checkpointOneByOne(
    items: readonly wire.CheckpointRequestWire[],
    options: CallOptions | undefined,
  ): Promise<BatchItemResult<CheckpointResponse>[]> {
    return Promise.all(
      items.map((item) =>
        this.unaryCheckpoint(item, options).then(
          (answer): BatchItemResult<CheckpointResponse> => ({ ok: true, answer }),
          (error: unknown): BatchItemResult<CheckpointResponse> => {
            if (!(error instanceof DedupRpcError)) return { ok: false, code: GrpcStatus.UNKNOWN, message: String(error) };
            return error.outcomeUnknown
              ? { ok: false, code: error.code, message: error.details, outcomeUnknown: true }
              : { ok: false, code: error.code, message: error.details };
          },
        ),
      ),
    );
  }

  private async unaryCheckpoint(req: wire.CheckpointRequestWire, options?: CallOptions): Promise<CheckpointResponse> {
    const res = await this.call<wire.CheckpointRequestWire, wire.CheckpointResponseWire>('Checkpoint', req, options);
    return wire.checkpointResponseFromWire(res.value);
  }

  /**
   * `items` sent by `send`, one RPC per shard group of their keys (at once),
   * the answers merged back in order: an RPC's item errors renumbered to the
   * items' positions, a failed RPC's error each of its items' result. Rejects
   * only when every RPC failed (nothing was done, or every outcome unknown).
   * Without a shard map, or all in one group: `send(items)`.
   */
  private async splitSend<Item extends { namespace: string; key: string }, Answer>(
    items: Item[],
    send: (part: Item[]) => Promise<BatchItemResult<Answer>[]>,
  ): Promise<BatchItemResult<Answer>[]> {
    await this.updateShardMap();
    const parts = this.shards.split(items);
    if (parts === undefined || parts.length <= 1) return send(items);
    const settled = await Promise.allSettled(parts.map((part) => send(part.map((i) => items[i] as Item))));
    const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    // Every RPC refused and none may have taken effect: nothing was done for
    // any item, and the caller's rules for a refused batch apply.
    if (failure !== undefined && settled.every((s) => s.status === 'rejected' && !isOutcomeUnknown(s.reason))) {
      throw failure.reason;
    }
    const results = new Array<BatchItemResult<Answer>>(items.length);
    parts.forEach((positions, k) => {
      const done = settled[k] as PromiseSettledResult<BatchItemResult<Answer>[]>;
      positions.forEach((position, j) => {
        results[position] =
          done.status === 'fulfilled' ? renumbered(done.value[j] as BatchItemResult<Answer>, j, position) : itemError(done.reason);
      });
    });
    return results;
  }

  /** Fetches the shard map when one is due (shard-map.ts); calls made meanwhile wait for it. Never rejects. */
  private async updateShardMap(): Promise<void> {
    if (this.mapFetch !== undefined) return this.mapFetch;
    if (!this.shards.startFetch()) return;
    const fetch = this.fetchShardMap();
    this.mapFetch = fetch;
    try {
      await fetch;
    } finally {
      this.mapFetch = undefined;
    }
  }

  private fetchShardMap(): Promise<void> {
    const deadline = Date.now() + Math.min(this.deadlineMs, FETCH_TIMEOUT_MS);
    return new Promise<void>((resolve) => {
      try {
        const method = shardMapMethod();
        this.endpoints
          .channel(this.endpoints.current)
          .makeUnaryRequest(
            method.path,
            method.requestSerialize,
            method.responseDeserialize,
            {},
            new Metadata(),
            { deadline },
            (error: ServiceError | null, response?: ShardMapResponseWire) => {
              if (error !== null || response === undefined) this.shards.fetchFailed(error?.code);
              else this.shards.fetched(response);
              resolve();
            },
          );
      } catch {
        // A closed client (the call itself then fails as before), or no
        // cluster.proto next to dist/: routed as before.
        this.shards.fetchFailed(undefined);
        resolve();
      }
    });
  }

  /** Where a request goes: its key's group with a shard map (a batch's: its first item's), else the Endpoints. */
  private routeFor(request: object): Route {
    const items = (request as { items?: { namespace: string; key: string }[] }).items;
    const keyed = (items === undefined ? request : items[0]) as { namespace?: unknown; key?: unknown } | undefined;
    if (keyed === undefined || typeof keyed.namespace !== 'string' || typeof keyed.key !== 'string') return this.endpoints;
    const group = this.shards.groupOf(keyed.namespace, keyed.key);
    return group === undefined ? this.endpoints : new GroupRoute(this.endpoints, this.shards, group);
  }

  /**
   * One call with the client's retries and leader following (failover.ts).
   * Batches pass 'fail': their items are retried one by one (batch-retry.ts).
   */
  private async call<Req extends object, Res extends object>(
    name: wire.MethodName,
    request: Req,
    options: CallOptions | undefined,
    extraDeadlineMs = 0,
    onUnknown: OnUnknownOutcome = 'retry',
  ): Promise<Invoked<Res>> {
    await this.updateShardMap();
    const route = this.routeFor(request);
    const group = route instanceof GroupRoute ? route : undefined;
    const method = wire.methodDefinition<Req, Res>(name);
    const perAttemptMs = (options?.deadlineMs ?? this.deadlineMs) + extraDeadlineMs;
    // The request object (and so a Begin's owner, or every BeginBatch item's)
    // is the same on every attempt: a retried Begin whose first answer was
    // lost is re-entered.
    return invoke(route, this.retryPolicy, name, perAttemptMs, onUnknown, (channel: GrpcClient, deadline: number) =>
      new Promise<Res>((resolve, reject) => {
        const call = channel.makeUnaryRequest(
          method.path,
          method.requestSerialize,
          method.responseDeserialize,
          request,
          new Metadata(),
          { deadline },
          (error: ServiceError | null, response?: Res) => {
            if (error !== null) reject(rpcError(name, error));
            else if (response === undefined) reject(new DedupRpcError(name, GrpcStatus.INTERNAL, 'INTERNAL', 'empty response'));
            else resolve(response);
          },
        );
        // Emitted right after the callback, before anything awaiting the
        // answer runs: the group's leader hint and the map's epoch.
        if (group !== undefined) call.on('status', (s: StatusObject) => group.trailers(s.metadata, s.code === GrpcStatus.OK));
      }),
    );
  }
}
