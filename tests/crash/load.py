"""The crash test's client load, logged attempt by attempt in one History
(history.client) so the checkers (history.checker, crash_checker.py) can
check it.

- UnaryWorker: history.workload's Worker (Get, Begin, Renew,
  Release, Complete on a small rolling set of keys, short and long leases,
  abandoned claims, takeovers, waits), through a NodeClient.
- BatchWorker: BeginBatch of 1-5 fresh keys and, every other time, 1-3 it
  used before (which must answer DUPLICATE once completed), then
  CompleteBatch of the items that STARTED (a few are abandoned instead).

Every batch item is logged as its own attempt (op "begin" or "complete", the
batch call's invoke and completion times, "batch": an id), so the checker
treats it exactly like a unary call. An item answered with an ItemError
ABORTED, or whose whole call failed without a definite answer, is
`unknown`; INVALID_ARGUMENT and RESOURCE_EXHAUSTED items are `fail` (nothing
was done). Items without a definite answer are sent again the safe way: the
same Begin (same owner) or the same Complete (same fence and result).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any, Optional

import grpc

from dedup.v1 import dedup_pb2
from history import workload
from history.client import GaveUp, History, LeaderClient, classify, response_fields
from history.workload import NAMESPACE, TTL_S, KeyPool

BATCH_LEASE_MS = 2000
# google.rpc.Code values an ItemError may carry.
_ABORTED = 10
_FAIL_CODES = {3: "rejected", 8: "overloaded"}  # INVALID_ARGUMENT, RESOURCE_EXHAUSTED


def _ignore_state(_state: grpc.ChannelConnectivity) -> None:
    pass


class NodeClient(LeaderClient):
    """A LeaderClient for one node, with two differences:

    - It backs off after every attempt without an answer: LeaderClient
      retries at once after a broken connection or a refused connect (to
      try another node), which with one restarting node would spin until it
      listens again.
    - It watches its channel's connectivity, which keeps a gRPC Python
      thread polling the channel. Without it, once calls have failed fast
      against the stopped node, nothing polls the channel between calls:
      the reconnect's TCP connect completes in the kernel but gRPC never
      sees it, cancels it at its connect timeout, and reconnecting takes
      about 4.7 s (9.7 s with the default connect timeout) instead of
      0.05-0.3 s (python3-grpcio 1.51; measured against a dedupd SIGKILLed
      and restarted at once).
    """

    def __init__(self, address: str, history: History, worker: str,
                 deadline_s: float, rng: random.Random,
                 stop: Optional[threading.Event] = None) -> None:
        super().__init__([address], history, worker, deadline_s, rng, stop)
        self._batches = 0
        for c in self.channels:
            c.subscribe(_ignore_state, try_to_connect=True)

    def close(self) -> None:
        for c in self.channels:
            c.unsubscribe(_ignore_state)
        super().close()

    def attempt(self, op: str, request: Any, fields: dict, key: str,
                extra_deadline_s: float = 0.0):
        outcome, resp, why, backoff = super().attempt(op, request, fields, key,
                                                      extra_deadline_s)
        return outcome, resp, why, backoff or outcome != "ok"

    def _sleep_backoff(self, backoffs: int) -> None:
        time.sleep(self.rng.uniform(0, min(0.2, 0.01 * 2 ** backoffs)))

    def run_batch(self, op: str, items: list, fields: list[dict],
                  budget_s: float = 10.0) -> list[dict]:
        """op "begin" (BeginBatch) or "complete" (CompleteBatch) of `items`
        (BeginRequest or CompleteRequest; `fields` what to log as each
        item's request). Sends again the items without a definite answer
        until every item has one; returns each item's response fields, in
        order. Raises GaveUp like LeaderClient.run."""
        method = self.stubs[0].BeginBatch if op == "begin" else self.stubs[0].CompleteBatch
        wrap = dedup_pb2.BeginBatchRequest if op == "begin" else dedup_pb2.CompleteBatchRequest
        answers: list[Optional[dict]] = [None] * len(items)
        pending = list(range(len(items)))
        start = time.monotonic()
        backoffs = 0
        while pending:
            self._batches += 1
            batch = f"{self.worker}/{self._batches}"

            def log(i: int, t_inv: float, t_done: float, outcome: str, **rest) -> None:
                self.history.add({"worker": self.worker, "op": op,
                                  "key": items[i].key, "req": fields[i], "node": 1,
                                  "t_inv": t_inv, "t_done": t_done,
                                  "outcome": outcome, "batch": batch, **rest})

            t_inv = self.history.now()
            still: list[int] = []
            rejected = False
            try:
                resp = method(wrap(items=[items[i] for i in pending]),
                              timeout=self.deadline_s)
            except grpc.RpcError as e:
                t_done = self.history.now()
                outcome, why, _ = classify(e)
                for i in pending:
                    log(i, t_inv, t_done, outcome, code=e.code().name, why=why,
                        details=(e.details() or "")[:160])
                still = pending
                rejected = why == "rejected"
            else:
                t_done = self.history.now()
                for i, item in zip(pending, resp.items):
                    if item.HasField("response"):
                        answers[i] = response_fields(op, item.response)
                        log(i, t_inv, t_done, "ok", resp=answers[i])
                        continue
                    code = item.error.code
                    why = _FAIL_CODES.get(code, "outcome_unknown" if code == _ABORTED
                                          else "other")
                    log(i, t_inv, t_done, "fail" if code in _FAIL_CODES else "unknown",
                        code=f"item:{code}", why=why, details=item.error.message[:160])
                    rejected = rejected or why == "rejected"
                    still.append(i)
            pending = still
            if not pending:
                break
            if rejected:
                self.rejected += 1
                raise GaveUp(f"{op} batch item rejected")
            if self.stop is not None and self.stop.is_set():
                raise GaveUp("stopping")
            if time.monotonic() - start > budget_s:
                raise GaveUp(f"{op} batch: no definite answer in {budget_s} s")
            backoffs += 1
            self._sleep_backoff(backoffs)
        return answers  # type: ignore[return-value]


class UnaryWorker(workload.Worker):
    """history.workload's Worker through a NodeClient, pausing a
    random 0..2*pace_s after each iteration (the history, kept in memory,
    grows with the load; a long run must fit)."""

    def __init__(self, name: str, address: str, history: History, pool: KeyPool,
                 seed: int, deadline_s: float, stop: threading.Event,
                 pace_s: float) -> None:
        super().__init__(name, [address], history, pool, seed, deadline_s, stop)
        self.client.close()
        self.client = NodeClient(address, history, name, deadline_s, self.rng, stop)
        self.pace_s = pace_s

    def iteration(self) -> None:
        super().iteration()
        self.stop.wait(self.rng.uniform(0, 2 * self.pace_s))


def begin_item(key: str, owner: str, lease_ms: int) -> tuple[Any, dict]:
    """A BeginRequest (args_hash as the unary workers use) and its log fields."""
    req = dedup_pb2.BeginRequest(namespace=NAMESPACE, key=key,
                                 args_hash=KeyPool.args_hash(key), owner=owner,
                                 lease_ms=lease_ms, ttl_s=TTL_S)
    return req, {"owner": owner, "lease_ms": lease_ms, "wait_ms": 0}


class BatchWorker(workload.LoopingWorker):
    def __init__(self, name: str, address: str, history: History, seed: int,
                 deadline_s: float, stop: threading.Event, pace_s: float) -> None:
        super().__init__(name)
        self.rng = random.Random(seed)
        self.stop = stop
        self.pace_s = pace_s
        self.client = NodeClient(address, history, name, deadline_s, self.rng, stop)
        self.used: list[str] = []  # keys of earlier batches, to revisit
        self.seq = 0

    def _fresh(self) -> str:
        self.seq += 1
        return f"{self.name}-{self.seq:06d}"

    def iteration(self) -> None:
        rng = self.rng
        keys = [self._fresh() for _ in range(rng.randint(1, 5))]
        if self.used and rng.random() < 0.5:
            keys += rng.sample(self.used, min(len(self.used), rng.randint(1, 3)))
        self.used = (self.used + [k for k in keys if k not in self.used])[-200:]
        owners = [uuid.UUID(int=rng.getrandbits(128)).hex for _ in keys]
        begins = [begin_item(k, o, BATCH_LEASE_MS) for k, o in zip(keys, owners)]
        answers = self.client.run_batch("begin", [b[0] for b in begins],
                                        [b[1] for b in begins])
        items, fields = [], []
        for key, owner, a in zip(keys, owners, answers):
            if a["status"] != "STARTED" or rng.random() < 0.05:
                continue  # DUPLICATE/IN_USE, or abandoned: its lease runs out
            outcome = dedup_pb2.ERROR if rng.random() < 0.1 else dedup_pb2.SUCCESS
            result = f"{key}/{owner[:8]}/{a['fence']}/{rng.getrandbits(32):08x}"
            items.append(dedup_pb2.CompleteRequest(
                namespace=NAMESPACE, key=key, fence=a["fence"], outcome=outcome,
                result=result.encode()))
            fields.append({"fence": a["fence"], "outcome": dedup_pb2.Outcome.Name(outcome),
                           "result": result})
        if items:
            self.client.run_batch("complete", items, fields)
        # Paced like the unary workers, per item.
        self.stop.wait(rng.uniform(0, 2 * self.pace_s * len(keys)))
