// Keeps the lease of a claim alive while withIdempotency's function runs, and
// tells the function (through an AbortSignal) when the claim is lost.
import { performance } from 'node:perf_hooks';

import { type LostClaimCall, OutcomeNotRecordedError, StaleFenceError } from './errors.js';
import type { FencedStatus, RenewRequest, RenewResponse } from './types.js';

/**
 * Whether a claim is lost, and how the function learns it: the first refused
 * fenced call while it runs (a renewal, or a checkpoint) aborts `signal`
 * with the error `lostError()` returns. Fences never go back, so a loss is
 * for good; later refusals change nothing.
 */
export class ClaimLoss {
  private readonly controller = new AbortController();
  private refusal: { status: FencedStatus; fence: bigint; call: LostClaimCall } | undefined;

  constructor(private readonly claim: { readonly namespace: string; readonly key: string; readonly fence: bigint }) {}

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The answer that lost the claim, if one did. */
  get lostAnswer(): FencedStatus | undefined {
    return this.refusal?.status;
  }

  /** Records the refusal of `call` (answer `status`, current fence `fence`) and aborts the signal. */
  lose(status: Exclude<FencedStatus, 'OK'>, fence: bigint, call: LostClaimCall): void {
    if (this.refusal !== undefined) return;
    this.refusal = { status, fence, call };
    this.controller.abort(this.lostError());
  }

  /** The error for a lost claim (undefined while it is not lost), caused by `cause` if given. */
  lostError(cause?: unknown): OutcomeNotRecordedError | undefined {
    const refusal = this.refusal;
    if (refusal === undefined) return undefined;
    const { namespace, key, fence } = this.claim;
    const options = { call: refusal.call, ...(cause !== undefined && { cause }) };
    return refusal.status === 'STALE_FENCE'
      ? new StaleFenceError(namespace, key, fence, refusal.fence, options)
      : new OutcomeNotRecordedError(refusal.status, namespace, key, fence, refusal.fence, options);
  }
}

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
 * A claim found lost otherwise (`loss` given and lost by a checkpoint) stops
 * the renewals too.
 */
export class LeaseKeeper {
  private readonly loss: ClaimLoss;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly renew: (request: RenewRequest) => Promise<RenewResponse>,
    private readonly options: LeaseKeeperOptions,
    loss?: ClaimLoss,
  ) {
    this.loss = loss ?? new ClaimLoss(options);
    this.loss.signal.addEventListener('abort', () => this.stop(), { once: true });
    this.schedule(options.grantedAt);
  }

  /** Aborts (with the error lostError() returns) when the claim is lost. */
  get signal(): AbortSignal {
    return this.loss.signal;
  }

  /** The answer that lost the claim, if one did. */
  get lostAnswer(): FencedStatus | undefined {
    return this.loss.lostAnswer;
  }

  /** No more renewals; an answer still on its way is ignored. Idempotent. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** The error for a lost claim (undefined while it is not lost), caused by `cause` if given. */
  lostError(cause?: unknown): OutcomeNotRecordedError | undefined {
    return this.loss.lostError(cause);
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
    this.stop();
    this.loss.lose(answer.status, answer.fence, 'Renew');
  }
}
