// Item-level retries of BeginBatch/CompleteBatch/CheckpointBatch. Items are
// independent on the server: in a replicated group some may be refused with
// UNAVAILABLE (the node stopped being the leader before proposing them:
// nothing happened) or ABORTED (leadership was lost after: the outcome is
// unknown) while the rest are answered. Those items alone go again in later
// rounds; an ABORTED one only where re-sending it is safe (a Begin with an
// owner, any Complete or Checkpoint). An item whose outcome stays unknown is
// never reported as "nothing happened". Begins refused only for the answer's
// result budget go again at once in smaller RPCs, without spending a round
// (see sendWithItemRetries).
import { status as GrpcStatus } from '@grpc/grpc-js';

import { fullJitterDelayMs } from './backoff.js';
import { DedupRpcError, grpcCodeName, isOutcomeUnknown } from './errors.js';
import type { RetryPolicy } from './retry.js';
import { itemResendable } from './retry-decision.js';
import type { BatchItemResult } from './types.js';

interface Slot<Answer> {
  /** Position in the caller's batch. */
  readonly index: number;
  /** Some round's answer for it was an unknown outcome. */
  unknown: boolean;
  last?: BatchItemResult<Answer>;
}

type ItemError = Extract<BatchItemResult<unknown>, { ok: false }>;

/**
 * Sends `items` with `send` (one batch RPC, with the client's own retries and
 * leader following), then re-sends the items refused with UNAVAILABLE or an
 * unknown outcome, up to `policy.maxAttempts` rounds with full-jitter backoff
 * between them. One result per item, in order. Rejects only when the first
 * RPC fails with an error other than an unknown outcome (then nothing was
 * done for any item); a whole RPC whose outcome is unknown counts as every
 * item's, and a later RPC's failure becomes each of its items' result.
 *
 * Begins refused because the answer already held the server's
 * --max_batch_response_bytes of stored results (isResultBudgetRefusal) are
 * not failures: many callers of one key with a large result would otherwise
 * go again all together, a few answered each round, until their rounds ran
 * out. They go again at once within the round (no backoff, no round spent),
 * one RPC after another, in groups of at most as many items as that answer
 * held results: about what fits one answer (a key's results have one size);
 * a group still too large splits again. That ends: a re-send is free only
 * when the answer held a result, so each group is smaller than the RPC it
 * came from. An answer that held none (one result larger than the whole
 * budget, e.g. stored under a larger --max_result_bytes) makes its refused
 * items ordinary UNAVAILABLEs.
 */
export async function sendWithItemRetries<Item, Answer>(
  policy: RetryPolicy,
  items: readonly Item[],
  /** Whether an item whose outcome is unknown may be sent again as it is. */
  canResend: (item: Item) => boolean,
  send: (items: Item[]) => Promise<BatchItemResult<Answer>[]>,
): Promise<BatchItemResult<Answer>[]> {
  const rounds = Math.max(1, Math.floor(policy.maxAttempts));
  const results: BatchItemResult<Answer>[] = new Array<BatchItemResult<Answer>>(items.length);
  let pending: Slot<Answer>[] = items.map((_, index) => ({ index, unknown: false }));
  const itemAt = (slot: Slot<Answer>): Item => items[slot.index] as Item;
  let sent = false;

  for (let round = 0; ; round++) {
    const again: Slot<Answer>[] = [];
    // The RPCs of this round: `pending`, then the groups refused for the
    // result budget, each as soon as the one before it is answered.
    const groups: Slot<Answer>[][] = [pending];
    for (let group = groups.shift(); group !== undefined; group = groups.shift()) {
      let answers: BatchItemResult<Answer>[];
      try {
        answers = await send(group.map(itemAt));
      } catch (error) {
        if (isOutcomeUnknown(error)) {
          const e = error as DedupRpcError;
          answers = group.map(() => ({ ok: false as const, code: GrpcStatus.ABORTED, message: e.details }));
        } else if (!sent) {
          throw error;
        } else {
          const e = asItemError(error);
          for (const slot of group) results[slot.index] = finalResult(slot, e);
          continue;
        }
      } finally {
        sent = true;
      }

      const fitted = answers.filter(holdsResult).length;
      const refused: Slot<Answer>[] = [];
      group.forEach((slot, j) => {
        const answer = answers[j];
        if (answer === undefined) throw new Error(`batch answer for items[${j}] missing`);
        const result = answer.ok ? answer : renumbered(answer, j, slot.index);
        slot.last = result;
        if (result.ok) {
          results[slot.index] = result;
        } else if (fitted > 0 && isResultBudgetRefusal(result)) {
          refused.push(slot);
        } else {
          const aborted = result.code === GrpcStatus.ABORTED;
          if (aborted) slot.unknown = true;
          if (itemResendable(result.code, aborted && canResend(itemAt(slot)))) again.push(slot);
          else results[slot.index] = finalResult(slot, result);
        }
      });
      const refits: Slot<Answer>[][] = [];
      for (let k = 0; k < refused.length; k += fitted) refits.push(refused.slice(k, k + fitted));
      groups.unshift(...refits); // before the other groups: their callers waited longer
    }
    if (again.length === 0) return results;
    if (round + 1 >= rounds) {
      for (const slot of again) results[slot.index] = finalResult(slot, slot.last as ItemError);
      return results;
    }
    pending = again;
    await policy.sleep(fullJitterDelayMs(policy.backoff, round, policy.random));
  }
}

// How dedupd marks a BeginBatch item it refused only because the answer
// already held its --max_batch_response_bytes of stored results:
// ItemError.reason, and before that field existed only the message
// (storage/store.h ResultBudgetExceeded). isResultBudgetRefusal is the one
// place that reads them.
export const RESULT_BUDGET_REASON = 'RESULT_BUDGET';
const RESULT_BUDGET_MARK = 'ask for this item again';

/**
 * An item refused only for the answer's result budget: nothing happened, and
 * it fits a later, smaller batch. UNAVAILABLE with reason RESULT_BUDGET; an
 * error with another reason is not one. An older server gives no reason:
 * then its message says so.
 */
export function isResultBudgetRefusal(result: BatchItemResult<unknown>): boolean {
  if (result.ok || result.code !== GrpcStatus.UNAVAILABLE) return false;
  if (result.reason !== undefined && result.reason !== '') return result.reason === RESULT_BUDGET_REASON;
  return result.message.includes(RESULT_BUDGET_MARK);
}

/** An answer that spent some of its batch's result budget: a DUPLICATE Begin carrying a stored result. */
function holdsResult(result: BatchItemResult<unknown>): boolean {
  if (!result.ok) return false;
  const stored = (result.answer as { result?: unknown }).result;
  return stored instanceof Uint8Array && stored.length > 0;
}

/** `error` as the result of an item whose outcome may have been unknown before. */
function finalResult<Answer>(slot: Slot<Answer>, error: ItemError): BatchItemResult<Answer> {
  if (!slot.unknown) return error;
  if (error.code === GrpcStatus.ABORTED) return { ok: false, code: error.code, message: error.message, outcomeUnknown: true };
  return {
    ok: false,
    code: GrpcStatus.ABORTED,
    message: `outcome unknown (retried; last attempt: ${grpcCodeName(error.code)}: ${error.message})`,
    outcomeUnknown: true,
  };
}

function asItemError(error: unknown): ItemError {
  if (error instanceof DedupRpcError) return { ok: false, code: error.code, message: error.details };
  return { ok: false, code: GrpcStatus.UNKNOWN, message: String(error) };
}

// The server names a refused item's field "items[j].<field>" by its position
// in the RPC; a resent item's position in the caller's batch is `index`.
function renumbered(error: ItemError, j: number, index: number): ItemError {
  const prefix = `items[${j}]`;
  if (j === index || !error.message.startsWith(prefix)) return error;
  return { ...error, message: `items[${index}]${error.message.slice(prefix.length)}` };
}
