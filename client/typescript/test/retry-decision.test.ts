// decideRetry and itemResendable on hand-built errors: no server.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { status as GrpcStatus } from '@grpc/grpc-js';

import { DedupRpcError, type DedupRpcErrorOptions } from '../src/errors.js';
import { decideRetry, itemResendable, type OnUnknownOutcome, type RetryDecision } from '../src/retry-decision.js';

const self = '10.0.0.1:7000';
const other = '10.0.0.2:7000';
const limits = { maxAttempts: 5, maxRedirects: 3, backoff: { baseMs: 50, capMs: 2000 }, random: () => 0.5 };

function error(code: number, options: DedupRpcErrorOptions = {}): DedupRpcError {
  return new DedupRpcError('Begin', code, 'X', 'refused', options);
}

function decide(e: unknown, attempt = 0, hops = 0, onUnknown: OnUnknownOutcome = 'retry', maxAttempts = 5): RetryDecision {
  return decideRetry(e, { target: self, attempt, hops }, { ...limits, maxAttempts }, onUnknown);
}

const answer = (advance = false, outcomeUnknown = false): RetryDecision => ({
  action: 'answer',
  delayMs: 0,
  advance,
  outcomeUnknown,
});
const retry = (delayMs: number, advance = false, outcomeUnknown = false): RetryDecision => ({
  action: 'retry',
  delayMs,
  advance,
  outcomeUnknown,
});
const unknown = (): DedupRpcError => error(GrpcStatus.ABORTED, { outcomeUnknown: true });

test('other errors are the answer', () => {
  for (const code of [GrpcStatus.INVALID_ARGUMENT, GrpcStatus.NOT_FOUND, GrpcStatus.ABORTED, GrpcStatus.RESOURCE_EXHAUSTED]) {
    assert.deepEqual(decide(error(code, { leader: other })), answer(), `code ${code}`);
  }
  assert.deepEqual(decide(new Error('not gRPC')), answer());
});

test('DEADLINE_EXCEEDED is the answer and moves later calls on', () => {
  assert.deepEqual(decide(error(GrpcStatus.DEADLINE_EXCEEDED)), answer(true));
});

test('a leader hint is followed at once within the attempt', () => {
  assert.deepEqual(decide(error(GrpcStatus.UNAVAILABLE, { leader: other }), 4, 2), { action: 'hop', leader: other });
});

test('hops used up: advance and back off', () => {
  // 0.5 * min(2000, 50 * 2^0)
  assert.deepEqual(decide(error(GrpcStatus.UNAVAILABLE, { leader: other }), 0, 3), retry(25, true));
});

test('a node naming itself is left', () => {
  assert.deepEqual(decide(error(GrpcStatus.UNAVAILABLE, { leader: self }), 2), retry(100, true));
});

test('UNAVAILABLE on the last attempt advances and answers', () => {
  assert.deepEqual(decide(error(GrpcStatus.UNAVAILABLE), 4), answer(true));
  assert.deepEqual(decide(error(GrpcStatus.UNAVAILABLE), 0, 0, 'retry', 0), answer(true)); // 0 attempts mean 1
});

test("the server's delay replaces the backoff", () => {
  assert.deepEqual(decide(error(GrpcStatus.RESOURCE_EXHAUSTED, { retryDelayMs: 1500 }), 3), retry(1500));
  assert.deepEqual(decide(error(GrpcStatus.RESOURCE_EXHAUSTED, { retryDelayMs: 1500 }), 4), answer());
});

test('an unknown outcome is retried only when safe', () => {
  assert.deepEqual(decide(unknown(), 1), retry(50, false, true));
  assert.deepEqual(decide(unknown(), 1, 0, 'fail'), answer(false, true));
  assert.deepEqual(decide(unknown(), 4), answer(false, true));
});

test('the backoff draws randomness only when it is used', () => {
  let draws = 0;
  const counting = { ...limits, random: () => (draws++, 0.5) };
  decideRetry(error(GrpcStatus.UNAVAILABLE, { leader: other }), { target: self, attempt: 0, hops: 0 }, counting, 'retry');
  decideRetry(error(GrpcStatus.UNAVAILABLE), { target: self, attempt: 4, hops: 0 }, counting, 'retry');
  decideRetry(error(GrpcStatus.RESOURCE_EXHAUSTED, { retryDelayMs: 9 }), { target: self, attempt: 0, hops: 0 }, counting, 'retry');
  assert.equal(draws, 0);
  decideRetry(error(GrpcStatus.UNAVAILABLE), { target: self, attempt: 0, hops: 0 }, counting, 'retry');
  assert.equal(draws, 1);
});

test('items: UNAVAILABLE always, ABORTED only when safe', () => {
  assert.equal(itemResendable(GrpcStatus.UNAVAILABLE, false), true);
  assert.equal(itemResendable(GrpcStatus.ABORTED, true), true);
  assert.equal(itemResendable(GrpcStatus.ABORTED, false), false);
  assert.equal(itemResendable(GrpcStatus.RESOURCE_EXHAUSTED, true), false);
  assert.equal(itemResendable(GrpcStatus.INVALID_ARGUMENT, true), false);
});
