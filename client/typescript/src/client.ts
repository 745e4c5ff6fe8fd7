// DedupClient: typed, promise-based calls to dedup.v1.Dedup with a deadline
// on every attempt and retries on UNAVAILABLE only.
import {
  type ChannelCredentials,
  type ChannelOptions,
  Client as GrpcClient,
  credentials as grpcCredentials,
  Metadata,
  type ServiceError,
  status as GrpcStatus,
} from '@grpc/grpc-js';

import { type BackoffOptions, DEFAULT_BACKOFF } from './backoff.js';
import { type CoalesceOptions, Coalescer } from './coalescer.js';
import { DedupRpcError, grpcCodeName } from './errors.js';
import {
  type IdempotencyOptions,
  type IdempotencyResult,
  type IdempotentFunction,
  withIdempotency,
} from './idempotency.js';
import { retryUnavailable, type RetryPolicy, sleep } from './retry.js';
import type {
  BatchItemResult,
  BeginBatchItem,
  BeginRequest,
  BeginResponse,
  CallOptions,
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

export interface DedupClientOptions {
  /** host:port of dedupd, e.g. "127.0.0.1:50051". */
  readonly address: string;
  /** Default: insecure (plaintext), as dedupd serves today. */
  readonly credentials?: ChannelCredentials;
  readonly channelOptions?: ChannelOptions;
  /** Deadline of each attempt in ms; Begin adds its waitMs. Default 5000. */
  readonly deadlineMs?: number;
  /** Attempts per call counting the first; only UNAVAILABLE is retried. Default 5. */
  readonly maxAttempts?: number;
  /** Delay before retry n is random(0, min(capMs, baseMs * 2^n)). Default base 50 ms, cap 2 s. */
  readonly backoff?: BackoffOptions;
  /** Uniform in [0, 1). Injectable for tests; default Math.random. */
  readonly random?: () => number;
  /** Injectable for tests; default setTimeout. */
  readonly sleep?: (ms: number) => Promise<void>;
  /**
   * Send concurrent begin (without waitMs) and complete calls as
   * BeginBatch/CompleteBatch RPCs: calls made while a batch is on the wire
   * leave together, a lone call leaves at once. Each caller still gets the
   * answer or DedupRpcError its unary call would have (a failed batch RPC:
   * its code and details, method "Begin"/"Complete", the batch's error as
   * `cause`). Give each begin an owner: a batch refused as too large is
   * re-sent item by item, and an anonymous Begin the server had applied
   * would then answer IN_USE. Worth it for a
   * process serving many calls at once (an MCP server running tool calls in
   * parallel): the server's per-RPC cost, not its storage, bounds unary
   * throughput. Calls given per-call options go alone. Default off.
   */
  readonly coalesce?: boolean | CoalesceOptions;
}

/**
 * One connection to dedupd, safe to share by every request of a process.
 * Every method resolves with the server's answer, which may be any answer
 * status (IN_USE, STALE_FENCE, ... are answers, not errors), and rejects with
 * DedupRpcError for gRPC errors.
 */
export class DedupClient {
  private readonly channel: GrpcClient;
  private readonly deadlineMs: number;
  private readonly retryPolicy: RetryPolicy;
  private readonly begins?: Coalescer<wire.BeginRequestWire, BeginResponse>;
  private readonly completes?: Coalescer<wire.CompleteRequestWire, CompleteResponse>;

  constructor(options: DedupClientOptions) {
    this.channel = new GrpcClient(
      options.address,
      options.credentials ?? grpcCredentials.createInsecure(),
      options.channelOptions ?? {},
    );
    this.deadlineMs = options.deadlineMs ?? 5000;
    this.retryPolicy = {
      maxAttempts: options.maxAttempts ?? 5,
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
    }
  }

  /** Claims (namespace, key), or reports who holds it or what it produced. */
  async begin(request: BeginRequest, options?: CallOptions): Promise<BeginResponse> {
    const req = wire.beginRequestToWire(request);
    if (this.begins !== undefined && req.wait_ms === 0 && options === undefined) return this.begins.submit(req);
    // The server may legitimately hold a Begin for wait_ms before answering.
    const res = await this.call<wire.BeginRequestWire, wire.BeginResponseWire>('Begin', req, options, req.wait_ms);
    return wire.beginResponseFromWire(res);
  }

  /** Records the outcome of the execution holding `fence`. */
  async complete(request: CompleteRequest, options?: CallOptions): Promise<CompleteResponse> {
    const req = wire.completeRequestToWire(request);
    if (this.completes !== undefined && options === undefined) return this.completes.submit(req);
    const res = await this.call<wire.CompleteRequestWire, wire.CompleteResponseWire>('Complete', req, options);
    return wire.completeResponseFromWire(res);
  }

  /** Gives a claim back when its side effect certainly did not happen. */
  async release(request: ReleaseRequest, options?: CallOptions): Promise<ReleaseResponse> {
    const req = wire.releaseRequestToWire(request);
    const res = await this.call<wire.ReleaseRequestWire, wire.ReleaseResponseWire>('Release', req, options);
    return wire.releaseResponseFromWire(res);
  }

  /** Extends the lease of the execution holding `fence`. */
  async renew(request: RenewRequest, options?: CallOptions): Promise<RenewResponse> {
    const req = wire.renewRequestToWire(request);
    const res = await this.call<wire.RenewRequestWire, wire.RenewResponseWire>('Renew', req, options);
    return wire.renewResponseFromWire(res);
  }

  /** Reads a record without changing it. */
  async get(request: KeyRequest, options?: CallOptions): Promise<GetResponse> {
    const req = wire.keyRequestToWire(request);
    const res = await this.call<wire.KeyRequestWire, wire.GetResponseWire>('Get', req, options);
    return wire.getResponseFromWire(res);
  }

  /** Removes a record (administration). */
  async forget(request: KeyRequest, options?: CallOptions): Promise<ForgetResponse> {
    const req = wire.keyRequestToWire(request);
    const res = await this.call<wire.KeyRequestWire, wire.ForgetResponseWire>('Forget', req, options);
    return wire.forgetResponseFromWire(res);
  }

  /**
   * Up to 1000 (the server's --max_batch_items) independent Begins in one
   * call: one result per item, in order. Rejects (e.g. INVALID_ARGUMENT
   * "items: ...") only when the batch as a whole is refused (empty or too
   * large) or the RPC fails, and then nothing was done for any item. Retried
   * like begin: every attempt re-sends each item with its owner, so give each
   * item its own owner and an item claimed by an attempt whose answer was lost
   * is re-entered (STARTED, same fence) rather than answered IN_USE. Anonymous
   * items cannot re-enter.
   */
  async beginBatch(items: readonly BeginBatchItem[], options?: CallOptions): Promise<BatchItemResult<BeginResponse>[]> {
    return this.sendBeginBatch(wire.beginBatchRequestToWire(items).items, options);
  }

  /** Up to 1000 independent Completes in one call, answered like beginBatch. Safe to retry: Complete is idempotent. */
  async completeBatch(
    items: readonly CompleteBatchItem[],
    options?: CallOptions,
  ): Promise<BatchItemResult<CompleteResponse>[]> {
    return this.sendCompleteBatch(wire.completeBatchRequestToWire(items).items, options);
  }

  /** Runs `fn` at most once per key; see withIdempotency in idempotency.ts. */
  withIdempotency<T>(options: IdempotencyOptions, fn: IdempotentFunction<T>): Promise<IdempotencyResult<T>> {
    return withIdempotency(this, options, fn);
  }

  /** Closes the channel; calls in progress fail. */
  close(): void {
    this.channel.close();
  }

  private async sendBeginBatch(
    items: wire.BeginRequestWire[],
    options?: CallOptions,
  ): Promise<BatchItemResult<BeginResponse>[]> {
    // No extra deadline: batch items never wait.
    const res = await this.call<wire.BeginBatchRequestWire, wire.BeginBatchResponseWire>('BeginBatch', { items }, options);
    return wire.beginBatchResponseFromWire(res, items.length);
  }

  private async sendCompleteBatch(
    items: wire.CompleteRequestWire[],
    options?: CallOptions,
  ): Promise<BatchItemResult<CompleteResponse>[]> {
    const res = await this.call<wire.CompleteBatchRequestWire, wire.CompleteBatchResponseWire>(
      'CompleteBatch',
      { items },
      options,
    );
    return wire.completeBatchResponseFromWire(res, items.length);
  }

  private call<Req extends object, Res extends object>(
    name: wire.MethodName,
    request: Req,
    options: CallOptions | undefined,
    extraDeadlineMs = 0,
  ): Promise<Res> {
    const method = wire.methodDefinition<Req, Res>(name);
    const perAttemptMs = (options?.deadlineMs ?? this.deadlineMs) + extraDeadlineMs;
    // The request object (and so a Begin's owner, or every BeginBatch item's)
    // is the same on every attempt: a retried Begin whose first answer was
    // lost is re-entered.
    return retryUnavailable(this.retryPolicy, () =>
      new Promise<Res>((resolve, reject) => {
        this.channel.makeUnaryRequest(
          method.path,
          method.requestSerialize,
          method.responseDeserialize,
          request,
          new Metadata(),
          { deadline: Date.now() + perAttemptMs },
          (error: ServiceError | null, response?: Res) => {
            if (error !== null) reject(rpcError(name, error));
            else if (response === undefined) reject(new DedupRpcError(name, GrpcStatus.INTERNAL, 'INTERNAL', 'empty response'));
            else resolve(response);
          },
        );
      }),
    );
  }
}

function rpcError(method: string, error: ServiceError): DedupRpcError {
  return new DedupRpcError(method, error.code, grpcCodeName(error.code), error.details, { cause: error });
}
