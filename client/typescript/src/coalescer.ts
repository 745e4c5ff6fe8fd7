// Coalescer: sends the concurrent calls of one kind (Begin, Complete or
// Checkpoint) as batches. A call leaves in the next microtask while fewer
// than maxBatchesInFlight batches are on the wire, so a lone call pays no
// added delay and calls made in the same turn of the event loop share a batch;
// otherwise it joins the next batch, which leaves as soon as one returns.
// Each caller gets the answer or error a unary call would have given.
// A batch closes at maxBatchItems or 3 MiB of requests; one refused with
// RESOURCE_EXHAUSTED (a message size limit on either side) is sent again item
// by item, each Begin with its owner. One refused with RESOURCE_EXHAUSTED and
// a RetryInfo (a tenant over its limits) was already re-sent whole after the
// server's delay by `send` (the client's call) while attempts remained, and
// is then not split. Leader following and the retries of
// refused items (UNAVAILABLE, unknown outcomes) are `send`'s: the client's
// batch calls do both, so a caller whose item's outcome stays unknown gets
// the DedupRpcError (ABORTED, outcomeUnknown) its unary call would have.
import { status as GrpcStatus } from '@grpc/grpc-js';

import { DedupRpcError, grpcCodeName } from './errors.js';
import type { BatchItemResult } from './types.js';

export interface CoalesceOptions {
  /** Items per batch; the server refuses more than its --max_batch_items (1000 by default). Default 256. */
  readonly maxBatchItems?: number;
  /** Batches of one kind on the wire at once. Default 2. */
  readonly maxBatchesInFlight?: number;
}

interface Waiter<Answer> {
  readonly resolve: (answer: Answer) => void;
  readonly reject: (error: unknown) => void;
}

interface Batch<WireItem, Answer> {
  readonly items: WireItem[];
  readonly waiters: Waiter<Answer>[];
  bytes: number;
}

/** Under gRPC's default 4 MiB message limit and dedupd's. */
const MAX_BATCH_BYTES = 3 << 20;

export class Coalescer<WireItem, Answer> {
  private readonly queue: Batch<WireItem, Answer>[] = [];
  private readonly maxItems: number;
  private readonly maxInFlight: number;
  private inFlight = 0;
  private flushScheduled = false;

  /**
   * `method` names the unary call in errors ("Begin"); `send` makes one
   * batch RPC (with the client's deadline and retries) and resolves with one
   * result per item.
   */
  constructor(
    private readonly method: string,
    private readonly send: (items: WireItem[]) => Promise<BatchItemResult<Answer>[]>,
    /** Approximate serialized size of an item, in bytes. */
    private readonly sizeOf: (item: WireItem) => number,
    options: CoalesceOptions = {},
  ) {
    this.maxItems = Math.min(1000, Math.max(1, Math.floor(options.maxBatchItems ?? 256)));
    this.maxInFlight = Math.max(1, Math.floor(options.maxBatchesInFlight ?? 2));
  }

  /** Queues one call already converted (and so validated) for the wire. */
  submit(item: WireItem): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      const bytes = this.sizeOf(item);
      let last = this.queue[this.queue.length - 1];
      if (
        last === undefined ||
        last.items.length >= this.maxItems ||
        (last.bytes > 0 && last.bytes + bytes > MAX_BATCH_BYTES)
      ) {
        last = { items: [], waiters: [], bytes: 0 };
        this.queue.push(last);
      }
      last.items.push(item);
      last.waiters.push({ resolve, reject });
      last.bytes += bytes;
      this.scheduleFlush();
    });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled || this.inFlight >= this.maxInFlight || this.queue.length === 0) return;
    this.flushScheduled = true;
    // A microtask, not a timer: nothing waits on a clock, yet every call
    // made in this turn (and every caller resumed by the answers just
    // delivered) joins the batch.
    queueMicrotask(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    while (this.inFlight < this.maxInFlight) {
      const batch = this.queue.shift();
      if (batch === undefined) return;
      this.sendBatch(batch);
    }
  }

  private sendBatch(batch: Batch<WireItem, Answer>): void {
    this.inFlight++;
    // Through a promise, so a send that throws rejects like one that fails.
    Promise.resolve()
      .then(() => this.send(batch.items))
      .then(
        (results) => this.deliver(batch, results),
        (error: unknown) => this.fail(batch, error),
      )
      .catch((error: unknown) => {
        for (const waiter of batch.waiters) waiter.reject(error);
      })
      .finally(() => {
        this.inFlight--;
        this.scheduleFlush();
      });
  }

  private fail(batch: Batch<WireItem, Answer>, error: unknown): void {
    // With a RetryInfo (a tenant over its limits) the batch already waited
    // and went again whole while attempts remained (the client's call):
    // "later", not "too large", so it is not split.
    if (
      error instanceof DedupRpcError &&
      error.code === GrpcStatus.RESOURCE_EXHAUSTED &&
      error.retryDelayMs === undefined &&
      batch.items.length > 1
    ) {
      // Too large for a message limit on one side (say, several DUPLICATEs
      // with large results in one answer): each item alone, as its unary
      // call would have gone.
      batch.items.forEach((item, i) => {
        const waiter = batch.waiters[i];
        if (waiter !== undefined) this.sendBatch({ items: [item], waiters: [waiter], bytes: 0 });
      });
      return;
    }
    for (const waiter of batch.waiters) {
      // Each caller's own error, named after its unary call.
      waiter.reject(
        error instanceof DedupRpcError
          ? new DedupRpcError(this.method, error.code, error.codeName, error.details, {
              cause: error,
              outcomeUnknown: error.outcomeUnknown,
              ...(error.retryDelayMs !== undefined && { retryDelayMs: error.retryDelayMs }),
            })
          : error,
      );
    }
  }

  private deliver(batch: Batch<WireItem, Answer>, results: BatchItemResult<Answer>[]): void {
    batch.waiters.forEach((waiter, i) => {
      const result = results[i];
      if (result === undefined) {
        waiter.reject(new DedupRpcError(this.method, GrpcStatus.INTERNAL, 'INTERNAL', `items[${i}]: no answer`));
      } else if (result.ok) {
        waiter.resolve(result.answer);
      } else {
        // The server names the field "items[i].<field>"; this caller sent
        // one request, so it gets the unary message "<field>: ...".
        const prefix = `items[${i}].`;
        const details = result.message.startsWith(prefix) ? result.message.slice(prefix.length) : result.message;
        waiter.reject(
          new DedupRpcError(this.method, result.code, grpcCodeName(result.code), details, {
            outcomeUnknown: result.outcomeUnknown === true,
          }),
        );
      }
    });
  }
}
