// Keeps the lease of a claim alive while withIdempotency's function runs, and
// tells the function (through an AbortSignal) when the claim is lost.
import { performance } from 'node:perf_hooks';

import { OutcomeNotRecordedError, StaleFenceError } from './errors.js';
import type { FencedStatus, RenewRequest, RenewResponse } from './types.js';

export interface LeaseKeeperOptions {
  readonly namespace: string;
  readonly key: string;
  readonly fence: bigint;
  /** Sent with each Renew; undefined: the server's default lease. */
  readonly leaseMs: number | undefined;
  /** Time between renewals (a third of the lease). */
  readonly intervalMs: number;
  /** performance.now() when the Begin that granted the lease was sent: the lease started after it. */
  readonly grantedAt: number;
}

/**
 * Renews every `intervalMs`, counted from the send time of the last Renew
 * (or Begin), one Renew at a time. A Renew refused (STALE_FENCE: another
 * owner took over; NOT_FOUND: the record expired, was released or
 * forgotten; ALREADY_COMPLETED) means the claim is lost for good, since
 * fences never go back: renewals stop and `signal` aborts with the error
 * `lostError()` returns. A Renew that fails (a DedupRpcError after the
 * client's retries) proves nothing: the next one goes an interval after it.
 */
export class LeaseKeeper {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private refusal: RenewResponse | undefined;

  constructor(
    private readonly renew: (request: RenewRequest) => Promise<RenewResponse>,
    private readonly options: LeaseKeeperOptions,
  ) {
    this.schedule(options.grantedAt);
  }

  /** Aborts (with the error lostError() returns) when a renewal is refused. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The Renew answer that lost the claim, if one did. */
  get lostAnswer(): FencedStatus | undefined {
    return this.refusal?.status;
  }

  /** No more renewals; an answer still on its way is ignored. Idempotent. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** The error for a lost claim (undefined while it is not lost), caused by `cause` if given. */
  lostError(cause?: unknown): OutcomeNotRecordedError | undefined {
    const answer = this.refusal;
    if (answer === undefined) return undefined;
    const { namespace, key, fence } = this.options;
    const options = { call: 'Renew' as const, ...(cause !== undefined && { cause }) };
    return answer.status === 'STALE_FENCE'
      ? new StaleFenceError(namespace, key, fence, answer.fence, options)
      : new OutcomeNotRecordedError(answer.status, namespace, key, fence, answer.fence, options);
  }

  private schedule(lastSentAt: number): void {
    if (this.stopped) return;
    const delay = Math.max(0, lastSentAt + this.options.intervalMs - performance.now());
    // Not unref'd: a claim being renewed is work in progress, and stop()
    // clears the timer as soon as the function settles.
    this.timer = setTimeout(() => void this.renewOnce(), delay);
  }

  private async renewOnce(): Promise<void> {
    if (this.stopped) return;
    const sentAt = performance.now();
    const { namespace, key, fence, leaseMs } = this.options;
    let answer: RenewResponse;
    try {
      answer = await this.renew({ namespace, key, fence, ...(leaseMs !== undefined && { leaseMs }) });
    } catch {
      // Unreachable server, overload: not a refusal. The lease may still be
      // live (or lapse with nobody taking over); try again.
      this.schedule(sentAt);
      return;
    }
    if (this.stopped) return;
    if (answer.status === 'OK') {
      this.schedule(sentAt);
      return;
    }
    this.refusal = answer;
    this.stop();
    this.controller.abort(this.lostError());
  }
}
