"""Which dedupd node a Client sends to: the addresses it was given, one
channel per address (opened on first use, then cached), and its current
guess of the leader.

In a replicated group only the leader answers; a follower answers
UNAVAILABLE with trailing metadata `dedup-leader: host:port` when it knows
the leader. The guess moves to that address (which may be one the client was
not given: it gets a channel too), and to the next given address when a node
answers UNAVAILABLE without it or cannot be reached. A single node is the
case of one address.

Every channel the Router opens is watched (channel.subscribe with
try_to_connect) until close(). Measured with grpcio 1.51 after a server was
SIGKILLed and restarted on the same port while calls failed fast: unwatched,
the first call got through about 4.7 s after the server listened again (7-9 s
after a 3 s outage); watched, 0.7 s (2.2 s), as the channel then keeps
connecting on its reconnect backoff instead of waiting; with the shorter
backoff the channels now get (dedup_client.reconnect), 0.15 s (0.1-0.8 s).
See tests/python/integration/test_reconnect.py.

A Client that is never closed must not keep the interpreter from exiting:
grpcio's watcher thread is a daemon, frozen once the interpreter finalizes,
and the channel's close (which the channel's own finalizer calls then)
waits for that thread's pending watch forever. So an atexit hook closes
every Router still open, while the watchers still run (a weak set: it keeps
no Client alive).

Closing unsubscribes first and waits for the watcher to end (its next wake,
within grpcio's 0.2 s poll) before it closes the channel: a watcher that
polls a closed channel dies with a ValueError traceback on stderr, and one
still running when the interpreter finalizes can be frozen holding the
channel's lock, which the channel's finalizer then waits for forever.

Against a sharded cluster the Router also holds the shard map
(dedup_client.shard_routing): route_for(request) is then the route of the
request's key's group, with a leader guess of its own, on the same channels.

Thread-safe: shared by every thread of a Client and its CoalescingClient.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from typing import Any, Callable, Optional

import grpc

from dedup_client._proto import cluster_pb2_grpc, dedup_pb2_grpc
from dedup_client.security import BearerToken, TokenInterceptor
from dedup_client.shard_routing import GroupRoute, ShardState, key_of, metadata_value
from dedup_client.slot import slot_of

LEADER_METADATA_KEY = "dedup-leader"

# The key of a channel the caller gave (it has no address of its own).
_GIVEN_CHANNEL = ""


def trailing_value(error: BaseException, key: str) -> Optional[str]:
    """The value of trailing metadata `key` on a failed call's error, or None
    (also for errors that carry no metadata, such as test doubles)."""
    getter = getattr(error, "trailing_metadata", None)
    if not callable(getter):
        return None
    try:
        metadata = getter()
    except Exception:  # noqa: BLE001 - no metadata is the answer then
        return None
    return metadata_value(metadata, key)


def _keep_connecting(_: grpc.ChannelConnectivity) -> None:
    """The subscriber of every channel a Router opens: being subscribed is
    what counts (see the module docstring), not the states reported."""


# How long close() waits for grpcio's watcher threads to end; they wake every
# 0.2 s, so this is only reached on a machine stalled for seconds.
_WATCHERS_END_TIMEOUT_S = 2.0


def _watcher_ended(channel: Any) -> bool:
    """Whether grpcio's watcher and delivery threads of an unsubscribed
    `channel` have left its lock for good. Read under that lock: once the
    watcher has set `polling` False it never takes the lock again. True for
    a grpcio without these internals (nothing to wait for then)."""
    state = getattr(channel, "_connectivity_state", None)
    if state is None and hasattr(channel, "_interceptor"):
        state = getattr(getattr(channel, "_channel", None), "_connectivity_state", None)
    lock = getattr(state, "lock", None)
    if lock is None:
        return True
    with lock:
        return not getattr(state, "polling", False) and not getattr(state, "delivering", False)


def _unsubscribe_and_close(channels: list[Any]) -> None:
    """Unsubscribes every channel, waits for their watchers to end together
    (see the module docstring), then closes them."""
    for channel in channels:
        channel.unsubscribe(_keep_connecting)
    deadline = time.monotonic() + _WATCHERS_END_TIMEOUT_S
    pending = channels
    while True:
        pending = [c for c in pending if not _watcher_ended(c)]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    for channel in channels:
        channel.close()


# Routers with watched channels, closed at exit (see the module docstring).
_open_routers: "weakref.WeakSet[Router]" = weakref.WeakSet()
_open_routers_lock = threading.Lock()


def _close_open_routers() -> None:
    """atexit: closes every Router not closed yet, all together, so their
    watches end within one of grpcio's 0.2 s polls rather than one after
    another."""
    with _open_routers_lock:
        routers = list(_open_routers)
        _open_routers.clear()
    _unsubscribe_and_close([c for router in routers for c in router._close_owned()])


atexit.register(_close_open_routers)


def leader_hint(error: BaseException) -> Optional[str]:
    """The leader's address a follower named in its UNAVAILABLE, or None."""
    hint = trailing_value(error, LEADER_METADATA_KEY)
    return hint or None


class Router:
    """Addresses, their channels and the leader guess of one Client."""

    def __init__(
        self,
        target: Any,
        channel_factory: Optional[Callable[[str], grpc.Channel]],
        token: Optional[BearerToken] = None,
    ) -> None:
        """target: "host:port", a non-empty sequence of them, or a channel
        (used as is, never closed here). channel_factory opens the channel of
        an address (default: plaintext); without one, a given channel's
        client cannot follow a redirect and treats it as a plain
        UNAVAILABLE. token: sent on every call of every channel, a given
        one and a redirect's included."""
        self._factory = channel_factory
        self._interceptor = TokenInterceptor(token) if token is not None else None
        self._channels: dict[str, grpc.Channel] = {}  # guarded by _lock
        self._stubs: dict[str, dedup_pb2_grpc.DedupStub] = {}  # guarded by _lock
        self._owned: set[str] = set()  # guarded by _lock
        if isinstance(target, str):
            self.addresses: tuple[str, ...] = (target,)
        elif isinstance(target, (list, tuple)):
            if not target or not all(isinstance(a, str) and a for a in target):
                raise ValueError("addresses must be a non-empty list of 'host:port'")
            self.addresses = tuple(dict.fromkeys(target))  # duplicates dropped
        else:
            self.addresses = (_GIVEN_CHANNEL,)
            self._channels[_GIVEN_CHANNEL] = target
        self._lock = threading.Lock()
        self._leader = self.addresses[0]  # guarded by _lock
        self._cursor = 0  # guarded by _lock: next given address to try
        self._closed = False  # guarded by _lock
        # The map's addresses need channels of their own.
        self.shards = ShardState(enabled=self.can_follow)

    def leader(self) -> str:
        """The address to send to now."""
        with self._lock:
            return self._leader

    def stub(self, address: str) -> dedup_pb2_grpc.DedupStub:
        """The stub of `address`'s channel, opened if new. Raises ValueError
        once closed (as a call on a closed channel does)."""
        stub = self._stubs.get(address)  # the common case, without the lock
        if stub is not None:
            return stub
        with self._lock:
            stub = self._stubs.get(address)
            if stub is not None:
                return stub
            if self._closed:
                raise ValueError("the dedup Client is closed")
            channel = self._channels.get(address)
            if channel is None:
                channel = self._open(address)
                self._channels[address] = channel
                self._owned.add(address)
            stub = dedup_pb2_grpc.DedupStub(self._wrap(channel))
            self._stubs[address] = stub
            return stub

    def cluster_stub(self, address: str) -> cluster_pb2_grpc.ClusterStub:
        """The dedup.v1.Cluster stub of `address`'s channel (the map's
        fetch), opened if new; raises ValueError once closed."""
        self.stub(address)
        with self._lock:
            channel = self._channels[address]
        return cluster_pb2_grpc.ClusterStub(self._wrap(channel))

    def route_for(self, request: Any) -> Any:
        """Where `request` goes: with a shard map, its key's group's route
        (a GroupRoute); else this Router, as before sharding."""
        held = self.shards.current
        key = key_of(request) if held is not None else None
        if held is None or key is None:
            return self
        return GroupRoute(self, self.shards, held.group_of(slot_of(*key)))

    def _open(self, address: str) -> Any:
        """Opens and watches the channel of `address` (AsyncRouter: an
        asyncio one)."""
        factory = self._factory or grpc.insecure_channel
        channel = factory(address)
        # Connects now, and keeps reconnecting while the server is away (see
        # the module docstring); grpcio runs one polling thread per
        # subscribed channel.
        channel.subscribe(_keep_connecting, try_to_connect=True)
        with _open_routers_lock:
            _open_routers.add(self)
        return channel

    def _wrap(self, channel: Any) -> Any:
        """The channel the stub uses: with the token's interceptor, if any
        (closing `channel` closes it)."""
        if self._interceptor is not None:
            return grpc.intercept_channel(channel, self._interceptor)
        return channel

    @property
    def can_follow(self) -> bool:
        """Whether a leader named in a redirect can be reached: not with a
        given channel and no channel_factory to open others."""
        return not (_GIVEN_CHANNEL in self.addresses and self._factory is None)

    def follow(self, address: str) -> None:
        """`address` answered as the leader (or was named as it)."""
        if self._leader == address:  # the common case, without the lock
            return
        with self._lock:
            self._leader = address

    def failed(self, address: str) -> None:
        """`address` did not answer and named no leader: the guess moves on
        to the next given address (unless another thread already moved it)."""
        with self._lock:
            if self._leader != address:
                return
            if address in self.addresses:
                self._cursor = self.addresses.index(address) + 1
            self._leader = self.addresses[self._cursor % len(self.addresses)]
            self._cursor += 1

    def close(self) -> None:
        """Closes the channels this Router opened, once their watcher
        threads have ended (usually within 0.2 s); later stub() calls for a
        new address raise, and calls on the closed channels fail."""
        with _open_routers_lock:
            _open_routers.discard(self)
        _unsubscribe_and_close(self._close_owned())

    def _close_owned(self) -> list[Any]:
        """Marks the router closed; returns the channels it opened."""
        with self._lock:
            self._closed = True
            return [self._channels[a] for a in self._owned]
