"""Slot routing against a sharded cluster (several Raft groups, each owning
a range of the 16,384 slots; see proto/dedup/v1/dedup.proto, "Routing").

A client fetches the cluster's shard map (dedup.v1.Cluster/ShardMap) from
its current address before its first call. With a map, each call goes to
its key's group: that group's last known leader, else one of its replicas;
a batch is split per group (and its answers merged back in order by the
caller). A node that is not the leader still answers (it forwards), with
the trailing metadata "dedup-leader" (the group's leader) and
"dedup-shard-epoch" (the map's epoch): the leader becomes the group's
guess, and an epoch higher than the map's makes the next call fetch the map
again (at most once a second), as does a leader named at an address the map
does not list.

Without a map (a single node answers UNIMPLEMENTED: never asked again; any
other failure: asked again 1 s later at the earliest, then 2, 4, ... up to
64 s after consecutive failures, so a node that hangs costs a call the
fetch's deadline only now and then) every call goes exactly where it went
before sharding: the Router's one leader guess.

Thread-safe: ShardState is shared by every thread and task of a client.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import grpc

from dedup_client.slot import SLOT_COUNT, slot_of

EPOCH_METADATA_KEY = "dedup-shard-epoch"

# At most one map fetch per this many seconds (an epoch seen rising, a
# leader outside the map, or a failed fetch).
REFRESH_INTERVAL_S = 1.0
# After consecutive failed fetches the interval doubles, up to this.
MAX_FAILED_INTERVAL_S = 64.0

# A fetch's deadline at most (the client's deadline_s when shorter): the map
# is an optimization, a call must not wait long for it.
FETCH_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ShardGroup:
    """One group of the map: slots [first_slot, end_slot), the client
    addresses of its replicas (the preferred leader first) and the leader
    the map named ("" when none)."""

    group_id: int
    first_slot: int
    end_slot: int
    replicas: tuple[str, ...]
    leader: str


@dataclass(frozen=True)
class ShardMap:
    """An immutable copy of a ShardMapResponse."""

    epoch: int
    groups: tuple[ShardGroup, ...]  # by first_slot
    addresses: frozenset[str]  # every replica's and leader's

    @staticmethod
    def of(response: Any) -> Optional["ShardMap"]:
        """The map of a ShardMapResponse, or None when it cannot be routed by
        (another slot space, gaps or overlaps, a group without addresses)."""
        if response.slot_count not in (0, SLOT_COUNT) or not response.groups:
            return None
        groups = []
        for g in sorted(response.groups, key=lambda g: g.first_slot):
            replicas = tuple(r.client_address for r in g.replicas if r.client_address)
            if not replicas and not g.leader_address:
                return None
            groups.append(ShardGroup(g.group_id, g.first_slot, g.end_slot,
                                     replicas, g.leader_address))
        expected = 0
        for g in groups:
            if g.first_slot != expected or g.end_slot <= g.first_slot:
                return None
            expected = g.end_slot
        if expected != SLOT_COUNT:
            return None
        addresses = frozenset(a for g in groups for a in (*g.replicas, g.leader) if a)
        return ShardMap(response.epoch, tuple(groups), addresses)

    def group_of(self, slot: int) -> ShardGroup:
        starts = [g.first_slot for g in self.groups]
        return self.groups[bisect.bisect_right(starts, slot) - 1]


def metadata_value(metadata: Any, key: str) -> Optional[str]:
    """The value of `key` in a call's metadata (pairs), or None."""
    for item in metadata or ():
        name, value = item[0], item[1]
        if name == key:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return None


class ShardState:
    """The map a client holds, each group's leader guess, and when to fetch
    the map again."""

    def __init__(self, enabled: bool, clock: Callable[[], float] = time.monotonic) -> None:
        """enabled: False when the client cannot open channels to the map's
        addresses (a given channel without a channel_factory): never fetched."""
        self._clock = clock
        self._lock = threading.Lock()
        self._map: Optional[ShardMap] = None  # guarded by _lock
        self._leaders: dict[int, str] = {}  # guarded by _lock
        self._disabled = not enabled  # guarded by _lock
        self._due = enabled  # guarded by _lock: a fetch is wanted
        self._fetching = False  # guarded by _lock
        self._last_fetch = float("-inf")  # guarded by _lock
        self._interval_s = REFRESH_INTERVAL_S  # guarded by _lock
        self._failures = 0  # guarded by _lock: consecutive failed fetches

    @property
    def current(self) -> Optional[ShardMap]:
        return self._map

    def fetch_due(self) -> bool:
        """Whether a fetch should start now (read without the lock: the
        common answer is False)."""
        if not self._due or self._disabled or self._fetching:
            return False
        return self._clock() - self._last_fetch >= self._interval_s

    def start_fetch(self) -> bool:
        """Claims the fetch that is due (False: none due, or another thread
        claimed it); the claimant reports fetched() or fetch_failed()."""
        with self._lock:
            if not self.fetch_due():
                return False
            self._fetching = True
            self._due = False
            self._last_fetch = self._clock()
            return True

    def fetched(self, response: Any) -> None:
        shard_map = ShardMap.of(response)
        with self._lock:
            self._fetching = False
            if shard_map is None:
                self._due = True  # asked again later: maybe a map in transition
                return
            self._interval_s, self._failures = REFRESH_INTERVAL_S, 0
            if self._map is not None and shard_map.epoch < self._map.epoch:
                return  # an older copy than the one held
            self._map = shard_map
            self._leaders = {g.group_id: g.leader for g in shard_map.groups if g.leader}

    def fetch_failed(self, error: Optional[BaseException]) -> None:
        """A fetch failed: UNIMPLEMENTED (a single node, or a server from
        before sharding) is final; anything else is asked again later."""
        code = error.code() if isinstance(error, grpc.RpcError) and callable(
            getattr(error, "code", None)) else None
        with self._lock:
            self._fetching = False
            if code == grpc.StatusCode.UNIMPLEMENTED and self._map is None:
                self._disabled = True
            else:
                self._due = True
                self._failures += 1
                self._interval_s = min(REFRESH_INTERVAL_S * 2 ** min(self._failures - 1, 6),
                                       MAX_FAILED_INTERVAL_S)

    def saw_epoch(self, value: Optional[str]) -> None:
        """An answer carried dedup-shard-epoch `value`."""
        held = self._map
        if held is None or value is None:
            return
        try:
            epoch = int(value)
        except ValueError:
            return
        if epoch > held.epoch:
            with self._lock:
                self._due = True

    def group_of(self, namespace: str, key: str) -> Optional[ShardGroup]:
        """The group of a key, or None without a map."""
        held = self._map
        return None if held is None else held.group_of(slot_of(namespace, key))

    def leader(self, group: ShardGroup) -> str:
        """Where the group's calls go: its leader guess, else its first
        replica ("" when the map gives neither: then the Router's guess)."""
        with self._lock:
            address = self._leaders.get(group.group_id)
        return address or (group.replicas[0] if group.replicas else "")

    def follow(self, group: ShardGroup, address: str) -> None:
        """`address` answered as the group's leader, or was named as it."""
        with self._lock:
            self._leaders[group.group_id] = address
            held = self._map
            if held is not None and address not in held.addresses:
                self._due = True  # the map is out of date

    def failed(self, group: ShardGroup, address: str) -> None:
        """`address` did not answer for the group and named no leader: the
        guess moves on to the group's next replica."""
        with self._lock:
            if self._leaders.get(group.group_id, address) != address:
                return  # another thread moved it already
            replicas = group.replicas
            if not replicas:
                self._leaders.pop(group.group_id, None)
                return
            after = replicas.index(address) + 1 if address in replicas else 0
            self._leaders[group.group_id] = replicas[after % len(replicas)]

    def split(self, requests: Sequence[Any]) -> Optional[Callable[[list[int]], list[list[int]]]]:
        """With a map: a function grouping indexes of `requests` (batch
        items) by their key's group, each group in request order and the
        groups by their first item. None without a map."""
        held = self._map
        if held is None:
            return None
        group_ids = [held.group_of(slot_of(r.namespace, r.key)).group_id for r in requests]

        def by_group(indexes: list[int]) -> list[list[int]]:
            parts: dict[int, list[int]] = {}
            for i in indexes:
                parts.setdefault(group_ids[i], []).append(i)
            return list(parts.values())

        return by_group


class GroupRoute:
    """The Router as one group's calls see it (AttemptRoute and the
    coalescing lanes use leader, follow, failed, can_follow and stub).
    What it learns moves the Router's own guess too, so leader_address()
    still names the last node that answered as a leader (with one group:
    the leader, as without a map), and a fetch goes to a live node."""

    def __init__(self, router: Any, shards: ShardState, group: ShardGroup) -> None:
        self._router = router
        self._shards = shards
        self.group = group

    @property
    def can_follow(self) -> bool:
        return bool(self._router.can_follow)

    def leader(self) -> str:
        return self._shards.leader(self.group) or self._router.leader()

    def follow(self, address: str) -> None:
        self._shards.follow(self.group, address)
        self._router.follow(address)

    def failed(self, address: str) -> None:
        self._shards.failed(self.group, address)
        self._router.failed(address)

    def stub(self, address: str) -> Any:
        return self._router.stub(address)

    def answered_with(self, metadata: Any) -> None:
        """An answer's trailing metadata: its leader hint and epoch."""
        hint = metadata_value(metadata, "dedup-leader")
        if hint:
            self.follow(hint)
        self._shards.saw_epoch(metadata_value(metadata, EPOCH_METADATA_KEY))

    def failed_with(self, error: BaseException) -> None:
        """A failed call's epoch (its leader hint goes through the retry
        rule, as without a map)."""
        getter = getattr(error, "trailing_metadata", None)
        if callable(getter):
            try:
                self._shards.saw_epoch(metadata_value(getter(), EPOCH_METADATA_KEY))
            except Exception:  # noqa: BLE001 - no metadata is no epoch
                pass


def key_of(request: Any) -> Optional[tuple[str, str]]:
    """(namespace, key) of a unary request or of a batch's first item."""
    items = getattr(request, "items", None)
    if items is not None:
        if not items:
            return None
        request = items[0]
    namespace, key = getattr(request, "namespace", None), getattr(request, "key", None)
    if not isinstance(namespace, str) or not isinstance(key, str):
        return None
    return namespace, key
