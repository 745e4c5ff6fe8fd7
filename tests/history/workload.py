"""The clients' workload: worker threads contending on a small, rolling set
of keys.

Each iteration picks a key and either reads it (Get) or Begins it with a
fresh owner. On STARTED the worker, like a tool runner, sometimes abandons
the claim (its lease runs out and another worker takes over), sometimes
Releases it, and otherwise optionally Renews and then Completes it with a
result unique to this attempt. Some Begins wait (wait_ms) for a busy key.
A third of the keys have 300 ms leases, so slow holders and abandoned claims
lead to takeovers; the others have 4 s leases. Records live 24 h, longer
than any run, so nothing expires during a run.

A completed key stays in play for a while (its Begins must be DUPLICATE),
then is replaced by a new key; now and then an old key is revisited.

Unknown outcomes are retried the safe way (LeaderClient.run): the same
Begin (same owner), the same Complete (same fence and result), the same
Release or Renew. A logical operation that never gets a definite answer is
abandoned; the checker treats its attempts as "may have happened".
"""

from __future__ import annotations

import hashlib
import random
import threading
import uuid
from typing import Callable, Optional, Sequence

from history.client import GaveUp, History, LeaderClient
from dedup.v1 import dedup_pb2

NAMESPACE = "fault"
TTL_S = 24 * 3600
SHORT_LEASE_MS = 300
LONG_LEASE_MS = 4000


class KeyPool:
    """The keys in play. Thread-safe.

    With group_of (a sharded cluster's key -> group id) and groups (the
    group ids), the keys in play are spread evenly over the groups (key i
    of the pool in groups[i % len(groups)]) and a key leaving play is
    replaced by one of the same group, so every group always has some."""

    def __init__(self, rng: random.Random, active: int,
                 group_of: Optional[Callable[[str], int]] = None,
                 groups: Sequence[int] = ()) -> None:
        self._rng = rng
        self._lock = threading.Lock()
        self._next = 0
        self._group_of = group_of if groups else None
        self.groups = list(groups)
        self.active = [self._new(self.groups[i % len(self.groups)] if self.groups else None)
                       for i in range(active)]
        self.retired: list[str] = []

    def _new(self, group: Optional[int] = None) -> str:
        """The next key name (of `group`, when the pool has groups)."""
        while True:
            self._next += 1
            key = f"k{self._next:06d}"
            if self._group_of is None or group is None or self._group_of(key) == group:
                return key

    def pick(self, rng: random.Random) -> str:
        with self._lock:
            if self.retired and rng.random() < 0.04:
                return rng.choice(self.retired)
            return rng.choice(self.active)

    def completed(self, key: str, rng: random.Random) -> None:
        """Seen COMPLETED: now and then the key leaves play."""
        with self._lock:
            if key in self.active and rng.random() < 0.3:
                group = self._group_of(key) if self._group_of is not None else None
                self.active[self.active.index(key)] = self._new(group)
                self.retired.append(key)

    @staticmethod
    def lease_ms(key: str) -> int:
        return SHORT_LEASE_MS if int(key[1:]) % 3 == 0 else LONG_LEASE_MS

    @staticmethod
    def args_hash(key: str) -> bytes:
        return hashlib.sha256(key.encode()).digest()


class LoopingWorker(threading.Thread):
    """A client thread that runs iteration() until `stop` is set; an
    operation given up on counts in gave_up, any other exception ends the
    thread and is kept in `error` for the runner. Subclasses set `client`
    and `stop` before start()."""

    client: LeaderClient
    stop: threading.Event

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.gave_up = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    self.iteration()
                except GaveUp:
                    self.gave_up += 1
        except BaseException as e:  # noqa: BLE001 - reported by the runner
            self.error = e
        finally:
            self.client.close()

    def iteration(self) -> None:
        raise NotImplementedError


class Worker(LoopingWorker):
    def __init__(self, name: str, addresses: list[str], history: History,
                 pool: KeyPool, seed: int, deadline_s: float,
                 stop: threading.Event,
                 router: Optional[Callable[[str], int]] = None,
                 spread: float = 0.0) -> None:
        """router, spread: a sharded cluster's, see LeaderClient."""
        super().__init__(name)
        self.rng = random.Random(seed)
        self.history = history
        self.pool = pool
        self.stop = stop
        self.client = LeaderClient(addresses, history, name, deadline_s, self.rng, stop,
                                   router=router, spread=spread)

    def iteration(self) -> None:
        rng = self.rng
        key = self.pool.pick(rng)
        if rng.random() < 0.12:
            resp = self.client.run(
                "get", dedup_pb2.GetRequest(namespace=NAMESPACE, key=key), {}, key)
            if resp.get("state") == "COMPLETED":
                self.pool.completed(key, rng)
            return
        lease = KeyPool.lease_ms(key)
        owner = uuid.UUID(int=rng.getrandbits(128)).hex
        wait_ms = 200 if rng.random() < 0.1 else 0
        req = dedup_pb2.BeginRequest(
            namespace=NAMESPACE, key=key, args_hash=KeyPool.args_hash(key),
            owner=owner, lease_ms=lease, ttl_s=TTL_S, wait_ms=wait_ms)
        resp = self.client.run(
            "begin", req, {"owner": owner, "lease_ms": lease, "wait_ms": wait_ms},
            key, extra_deadline_s=wait_ms / 1000)
        if resp["status"] == "DUPLICATE":
            self.pool.completed(key, rng)
        elif resp["status"] == "STARTED":
            self.execute(key, owner, resp["fence"], lease)
        elif resp["status"] == "IN_USE":
            # Busy: back off a little (another key next time, most likely).
            self.stop.wait(rng.uniform(0, min(resp["retry_after_ms"], 100) / 1000))

    def execute(self, key: str, owner: str, fence: int, lease: int) -> None:
        rng = self.rng
        choice = rng.random()
        if choice < 0.08:
            return  # abandoned: the lease runs out, someone takes over
        if rng.random() < 0.3:
            # The side effect takes a while; a short lease may run out.
            factor = 1.3 if lease == SHORT_LEASE_MS else 0.1
            self.stop.wait(rng.uniform(0, lease / 1000 * factor))
        if choice < 0.22:
            self.client.run(
                "release",
                dedup_pb2.ReleaseRequest(namespace=NAMESPACE, key=key, fence=fence),
                {"fence": fence}, key)
            return
        if rng.random() < 0.2:
            resp = self.client.run(
                "renew",
                dedup_pb2.RenewRequest(namespace=NAMESPACE, key=key, fence=fence,
                                       lease_ms=lease),
                {"fence": fence, "lease_ms": lease}, key)
            if resp["status"] != "OK":
                return
        outcome = dedup_pb2.ERROR if rng.random() < 0.1 else dedup_pb2.SUCCESS
        result = f"{key}/{owner[:8]}/{fence}/{rng.getrandbits(32):08x}"
        self.client.run(
            "complete",
            dedup_pb2.CompleteRequest(namespace=NAMESPACE, key=key, fence=fence,
                                      outcome=outcome, result=result.encode()),
            {"fence": fence, "outcome": dedup_pb2.Outcome.Name(outcome),
             "result": result}, key)
