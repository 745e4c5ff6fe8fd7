// Coalescer: sends the concurrent calls of one kind (Begin or Complete) as
// batches. A call leaves in the next microtask while fewer than
// maxBatchesInFlight batches are on the wire, so a lone call pays no added
// delay and calls made in the same turn of the event loop share a batch;
// otherwise it joins the next batch, which leaves as soon as one returns.
// Each caller gets the answer or error a unary call would have given.
import { status as GrpcStatus } from '@grpc/grpc-js';

import { DedupRpcError } from './errors.js';
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
}

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
    options: CoalesceOptions = {},
  ) {
    this.maxItems = Math.min(1000, Math.max(1, Math.floor(options.maxBatchItems ?? 256)));
    this.maxInFlight = Math.max(1, Math.floor(options.maxBatchesInFlight ?? 2));
  }

  /** Queues one call already converted (and so validated) for the wire. */
  submit(item: WireItem): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      let last = this.queue[this.queue.length - 1];
      if (last === undefined || last.items.length >= this.maxItems) {
        last = { items: [], waiters: [] };
        this.queue.push(last);
      }
      last.items.push(item);
      last.waiters.push({ resolve, reject });
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
      this.inFlight++;
      this.send(batch.items)
        .then(
          (results) => this.deliver(batch, results),
          (error: unknown) => {
            for (const waiter of batch.waiters) waiter.reject(error);
          },
        )
        .finally(() => {
          this.inFlight--;
          this.scheduleFlush();
        });
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
          new DedupRpcError(this.method, result.code, GrpcStatus[result.code] ?? `CODE_${result.code}`, details),
        );
      }
    });
  }
}
