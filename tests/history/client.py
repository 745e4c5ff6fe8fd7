"""A leader-following dedup.v1 client that logs every attempt.

Each attempt is one gRPC call to one node, logged (History.add) with its
invoke and completion times (this process's monotonic clock, seconds since
the run started) and its outcome:

  ok       the node answered; `resp` holds the response's fields.
  fail     certainly nothing happened: INVALID_ARGUMENT and the like,
           RESOURCE_EXHAUSTED (queue full), UNAVAILABLE from a node that
           refused the call because it is not the leader (its details say
           "not the leader", with or without the `dedup-leader` hint), or a
           channel that could not connect (the call was never sent).
  unknown  it may or may not have happened, now or later: ABORTED with
           `dedup-outcome: unknown`, DEADLINE_EXCEEDED, UNAVAILABLE for any
           other reason (a connection broken mid-call), anything else. The
           checker treats these as possibly taking effect at any time after
           their invocation.

Classifying a refusal as `unknown` only weakens the checks; classifying an
operation that took effect as `fail` could make the checker report a
violation that is not one, so `fail` is kept to the cases above.

Leader guess: a node that named the leader sends the next attempt there; a
node that timed out or broke the connection is avoided for a while (a
SIGSTOPped or isolated leader would hold every call until its deadline, and
followers keep naming it until an election ends).

Sharded clusters (a `router`, key -> group id): one leader guess per group,
learnt from the "dedup-leader" hint of refusals and of answers a node
forwarded to the group's leader (dedup.proto, "Routing"); a share
(`spread`) of the attempts goes to a random node instead, which forwards
it one hop. Each attempt's record then also names its key's `group`.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import Any, Callable, Optional

import grpc

from dedup.v1 import dedup_pb2, dedup_pb2_grpc

LEADER_KEY = "dedup-leader"
OUTCOME_KEY = "dedup-outcome"

_CHANNEL_OPTIONS = [
    # One attempt is one send: no retries inside gRPC.
    ("grpc.enable_retries", 0),
    # Reconnect quickly to a restarted node (the default backoff grows to
    # two minutes).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    # Each worker its own connections, as separate client processes would.
    ("grpc.use_local_subchannel_pool", 1),
]


class History:
    """Every attempt of every client, in the order they were logged.
    Thread-safe (list.append under the GIL; ids from one counter)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.ops: list[dict] = []
        self._ids = itertools.count()
        self._lock = threading.Lock()
        # Time of the latest acknowledged write, for the driver's polling;
        # per group for records that name one (sharded clusters).
        self.last_write_ack = -1.0
        self.last_write_ack_by_group: dict[int, float] = {}

    def now(self) -> float:
        return time.monotonic() - self.t0

    def add(self, op: dict) -> None:
        with self._lock:
            op["id"] = next(self._ids)
            self.ops.append(op)
            if op["outcome"] == "ok" and is_write_ack(op):
                self.last_write_ack = max(self.last_write_ack, op["t_done"])
                g = op.get("group")
                if g is not None:
                    self.last_write_ack_by_group[g] = max(
                        self.last_write_ack_by_group.get(g, -1.0), op["t_done"])

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.ops)


def is_write_ack(op: dict) -> bool:
    """An acknowledged operation that changed the state."""
    if op["outcome"] != "ok":
        return False
    status = op["resp"].get("status")
    return ((op["op"] == "begin" and status == "STARTED") or
            (op["op"] in ("complete", "release", "renew") and status == "OK"))


def _enum(enum_type, value: int) -> str:
    try:
        return enum_type.Name(value)
    except ValueError:
        return str(value)


def _text(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


def response_fields(op: str, resp: Any) -> dict:
    if op == "begin":
        return {"status": _enum(dedup_pb2.BeginResponse.Status, resp.status),
                "fence": resp.fence, "takeover": resp.takeover,
                "attempts": resp.attempts,
                "lease_expires_at": resp.lease_expires_at,
                "retry_after_ms": resp.retry_after_ms,
                "outcome": _enum(dedup_pb2.Outcome, resp.outcome),
                "result": _text(resp.result)}
    if op == "complete":
        return {"status": _enum(dedup_pb2.CompleteResponse.Status, resp.status),
                "fence": resp.fence}
    if op == "release":
        return {"status": _enum(dedup_pb2.ReleaseResponse.Status, resp.status),
                "fence": resp.fence}
    if op == "renew":
        return {"status": _enum(dedup_pb2.RenewResponse.Status, resp.status),
                "fence": resp.fence, "lease_expires_at": resp.lease_expires_at}
    if op == "get":
        if not resp.found:
            return {"found": False}
        r = resp.record
        return {"found": True, "state": _enum(dedup_pb2.RecordState, r.state),
                "fence": r.fence, "owner": r.owner,
                "outcome": _enum(dedup_pb2.Outcome, r.outcome),
                "result": _text(r.result), "attempts": r.attempts,
                "lease_expires_at": r.lease_expires_at}
    raise ValueError(op)


def _metadata(error, key: str) -> Optional[str]:
    """Trailing metadata `key` of a failed call (grpc.RpcError) or of an
    answered one (the grpc.Call of with_call)."""
    try:
        md = error.trailing_metadata() or ()
    except Exception:  # noqa: BLE001
        return None
    for k, v in md:
        if k == key:
            return v.decode() if isinstance(v, bytes) else v
    return None


def classify(error: grpc.RpcError) -> tuple[str, str, Optional[str]]:
    """(outcome, why, leader hint) of a failed call; see the module doc."""
    code = error.code()
    details = error.details() or ""
    hint = _metadata(error, LEADER_KEY)
    if code == grpc.StatusCode.UNAVAILABLE:
        if hint is not None or details.startswith("not the leader"):
            return "fail", "not_leader", hint
        if "failed to connect to all addresses" in details:
            return "fail", "no_connection", None
        return "unknown", "unavailable", None
    if code == grpc.StatusCode.ABORTED:
        return "unknown", ("outcome_unknown" if _metadata(error, OUTCOME_KEY) == "unknown"
                           else "aborted"), None
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "unknown", "deadline", None
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return "fail", "overloaded", None
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNIMPLEMENTED,
                grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS):
        return "fail", "rejected", None
    return "unknown", "other", None


class GaveUp(Exception):
    """A logical operation got no definite answer within its budget (or the
    run is stopping)."""


class LeaderClient:
    """One worker's channels to every node and its leader guess. Not
    thread-safe: one per worker thread."""

    def __init__(self, addresses: list[str], history: History, worker: str,
                 deadline_s: float, rng: random.Random,
                 stop: Optional[threading.Event] = None,
                 router: Optional[Callable[[str], int]] = None,
                 spread: float = 0.0) -> None:
        """router: a sharded cluster's key -> group id (None: one group);
        spread: with a router, the share of attempts sent to a random node."""
        self.addresses = list(addresses)
        self.router = router
        self.spread = spread
        # With a router: group id -> index of its guessed leader.
        self.group_leaders: dict[int, int] = {}
        self.history = history
        self.worker = worker
        self.deadline_s = deadline_s
        self.rng = rng
        self.stop = stop
        self.channels = [grpc.insecure_channel(a, options=_CHANNEL_OPTIONS)
                         for a in self.addresses]
        self.stubs = [dedup_pb2_grpc.DedupStub(c) for c in self.channels]
        self.leader = rng.randrange(len(self.addresses))
        self.avoid_until = [0.0] * len(self.addresses)
        self.rejected = 0  # INVALID_ARGUMENT and the like: a workload bug

    def close(self) -> None:
        for c in self.channels:
            c.close()

    def _guess(self, group: Optional[int]) -> int:
        if group is None:
            return self.leader
        if group not in self.group_leaders:
            self.group_leaders[group] = self.rng.randrange(len(self.addresses))
        return self.group_leaders[group]

    def _set_guess(self, group: Optional[int], index: int) -> None:
        if group is None:
            self.leader = index
        else:
            self.group_leaders[group] = index

    def _pick(self, group: Optional[int] = None) -> int:
        now = time.monotonic()
        n = len(self.addresses)
        if group is not None and self.spread > 0 and self.rng.random() < self.spread:
            usable = [i for i in range(n) if self.avoid_until[i] <= now]
            return self.rng.choice(usable or list(range(n)))
        guess = self._guess(group)
        if self.avoid_until[guess] <= now:
            return guess
        for i in range(1, n):
            c = (guess + i) % n
            if self.avoid_until[c] <= now:
                self._set_guess(group, c)
                return c
        return guess

    def attempt(self, op: str, request: Any, fields: dict, key: str,
                extra_deadline_s: float = 0.0) -> tuple[str, Optional[dict], str, bool]:
        """One call to the guessed leader, logged. Returns (outcome, response
        fields or None, why, whether to back off before the next attempt)."""
        group = self.router(key) if self.router is not None else None
        target = self._pick(group)
        method = getattr(self.stubs[target], op.capitalize())
        where = {"node": target + 1} if group is None else {"node": target + 1,
                                                            "group": group}
        t_inv = self.history.now()
        try:
            timeout = self.deadline_s + extra_deadline_s
            if group is None:
                resp = method(request, timeout=timeout)
            else:
                resp, call = method.with_call(request, timeout=timeout)
            t_done = self.history.now()
            rec = {"worker": self.worker, "op": op, "key": key, "req": fields,
                   **where, "t_inv": t_inv, "t_done": t_done,
                   "outcome": "ok", "resp": response_fields(op, resp)}
            self.history.add(rec)
            if group is not None:
                # Forwarded: the answer names the group's leader.
                hint = _metadata(call, LEADER_KEY)
                if hint in self.addresses:
                    self._set_guess(group, self.addresses.index(hint))
            return "ok", rec["resp"], "", False
        except grpc.RpcError as e:
            t_done = self.history.now()
            outcome, why, hint = classify(e)
            self.history.add({
                "worker": self.worker, "op": op, "key": key, "req": fields,
                **where, "t_inv": t_inv, "t_done": t_done,
                "outcome": outcome, "code": e.code().name, "why": why,
                "details": (e.details() or "")[:160]})
        now = time.monotonic()
        n = len(self.addresses)
        backoff = True
        if why == "not_leader" and hint in self.addresses:
            h = self.addresses.index(hint)
            if h != target:
                self._set_guess(group, h)
                backoff = self.avoid_until[h] > now
            else:
                self._set_guess(group, (target + 1) % n)
        elif why == "not_leader":
            self._set_guess(group, (target + 1) % n)  # an election: ask around
        elif why == "no_connection":
            self.avoid_until[target] = now + 0.5
            self._set_guess(group, (target + 1) % n)
            # Nobody to connect to (every node down, e.g. a whole group's
            # power loss): back off rather than spin through failed calls.
            backoff = all(t > now for t in self.avoid_until)
        elif why in ("deadline", "unavailable", "other"):
            self.avoid_until[target] = now + 1.5
            self._set_guess(group, (target + 1) % n)
            backoff = False
        elif why == "rejected":
            self.rejected += 1
        return outcome, None, why, backoff

    def run(self, op: str, request: Any, fields: dict, key: str,
            budget_s: float = 10.0, extra_deadline_s: float = 0.0) -> dict:
        """Attempts until a definite answer (the response fields); raises
        GaveUp when the budget runs out, the run stops, or the request is
        rejected as invalid. The caller retries unknown outcomes the safe
        way by passing the same request again (same owner for Begin, same
        fence and result for Complete)."""
        start = time.monotonic()
        backoffs = 0
        while True:
            outcome, resp, why, backoff = self.attempt(op, request, fields, key,
                                                       extra_deadline_s)
            if outcome == "ok":
                return resp
            if why == "rejected":
                raise GaveUp(f"{op} rejected")
            if self.stop is not None and self.stop.is_set():
                raise GaveUp("stopping")
            if time.monotonic() - start > budget_s:
                raise GaveUp(f"{op}: no definite answer in {budget_s} s")
            if backoff:
                backoffs += 1
                # Full jitter, short cap: failover time is measured through
                # these clients, so they must not sleep through it.
                time.sleep(self.rng.uniform(0, min(0.2, 0.01 * 2 ** backoffs)))
            else:
                backoffs = 0
