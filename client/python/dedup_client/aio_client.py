"""AsyncClient: the Client's calls on grpc.aio, for asyncio programs (e.g.
FastMCP tools, which are `async def`).

Same options, answers, errors and retries as dedup_client.Client (the retry
decisions are shared: dedup_client.policy): UNAVAILABLE retried with
exponential backoff and full jitter, a follower's redirect followed at once,
an unknown outcome retried only the safe way, a tenant's RetryInfo waited
out; tls=, token=, token_file= and channel_options= as documented there.
Waits are `await asyncio.sleep(...)` (injectable as `sleep`), so a retrying
call never blocks the event loop.

A sharded cluster is routed by its shard map as the Client does (see
dedup_client.client and dedup_client.shard_routing).

Channels are grpc.aio channels, opened on first use inside the running event
loop and bound to it: use an AsyncClient from one event loop, and
`await client.close()` (or `async with`) when done. A token is sent as call
metadata (`authorization: Bearer <token>`) on every call, redirects
included; a given grpc.aio.Channel target gets it too.

Every channel the client opens is watched by a task that keeps it
connecting while the server is away (the asyncio counterpart of the
Router's channel.subscribe, see dedup_client.routing and reconnect).
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any, Awaitable, Callable, Optional, Sequence, Union

import grpc
import grpc.aio

from dedup_client._proto import cluster_pb2, dedup_pb2
from dedup_client.client_base import ClientBase
from dedup_client.errors import DedupRpcError
from dedup_client.messages import (
    begin_request,
    begin_timeout_s,
    checkpoint_request,
    complete_request,
    forget_request,
    get_request,
    release_request,
    renew_request,
)
from dedup_client.policy import AttemptRoute, BatchRun, CallRetry
from dedup_client.routing import Router
from dedup_client.security import TlsConfig

AsyncTarget = Union[str, Sequence[str], grpc.aio.Channel]


async def _keep_connecting(channel: grpc.aio.Channel) -> None:
    """Asks `channel` to connect whenever its state changes, until
    cancelled: what channel.subscribe(..., try_to_connect=True) does for a
    blocking channel."""
    try:
        while True:
            state = channel.get_state(try_to_connect=True)
            await channel.wait_for_state_change(state)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - the channel was closed under us
        return


class AsyncRouter(Router):
    """The Router of an AsyncClient: grpc.aio channels, each watched by a
    task; no interceptor (the token goes as call metadata)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watchers: list[asyncio.Task] = []

    def _open(self, address: str) -> Any:
        factory = self._factory or grpc.aio.insecure_channel
        channel = factory(address)
        self._watchers.append(asyncio.get_running_loop().create_task(
            _keep_connecting(channel), name=f"dedup-keep-connecting {address}"))
        return channel

    def _wrap(self, channel: Any) -> Any:
        return channel

    def close(self) -> None:  # pragma: no cover - AsyncClient awaits aclose()
        raise TypeError("an AsyncRouter is closed with `await aclose()`")

    async def aclose(self) -> None:
        owned = self._close_owned()
        watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        for channel in owned:
            await channel.close()


class AsyncClient(ClientBase):
    """The asyncio client for one dedupd address, a replicated group's
    addresses, or an existing grpc.aio.Channel. Its coroutines return the
    same protobuf responses as the Client's methods and raise the same
    errors."""

    _router_class = AsyncRouter
    _secure = staticmethod(grpc.aio.secure_channel)
    _insecure = staticmethod(grpc.aio.insecure_channel)

    def __init__(
        self,
        target: Optional[AsyncTarget] = None,
        deadline_s: float = 5.0,
        max_attempts: Optional[int] = None,
        backoff_base_s: float = 0.05,
        backoff_cap_s: float = 2.0,
        *,
        max_leader_hops: int = 3,
        channel_factory: Optional[Callable[[str], grpc.aio.Channel]] = None,
        tls: Union[None, bool, TlsConfig] = None,
        token: Optional[str] = None,
        token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        allow_insecure_token: bool = False,
        channel_options: Sequence[tuple[str, Any]] = (),
        uniform01: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """As Client(...); channel_factory must open grpc.aio channels (e.g.
        lambda address: grpc.aio.secure_channel(address, credentials)), and
        sleep is a coroutine function (default asyncio.sleep). Nothing is
        opened here: the client may be made outside the event loop (e.g. at
        import time) and used inside it."""
        super().__init__(
            target, deadline_s, max_attempts, backoff_base_s, backoff_cap_s,
            max_leader_hops=max_leader_hops, channel_factory=channel_factory,
            tls=tls, token=token, token_file=token_file,
            allow_insecure_token=allow_insecure_token,
            channel_options=channel_options, uniform01=uniform01,
        )
        self._sleep = sleep

    async def close(self) -> None:
        """Closes the channels this client opened (not a given one)."""
        await self._router.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def begin(
        self,
        namespace: str,
        key: str,
        args_hash: bytes = b"",
        *,
        owner: str = "",
        lease_ms: int = 0,
        ttl_s: int = 0,
        wait_ms: int = 0,
        accept_rerun: bool = False,
    ) -> dedup_pb2.BeginResponse:
        """Client.begin."""
        request = begin_request(
            namespace, key, args_hash, owner=owner, lease_ms=lease_ms,
            ttl_s=ttl_s, wait_ms=wait_ms, accept_rerun=accept_rerun,
        )
        return await self._call("Begin", request, begin_timeout_s(self.deadline_s, request))

    async def complete(
        self,
        namespace: str,
        key: str,
        fence: int,
        outcome: int,
        result: bytes = b"",
        *,
        ttl_s: int = 0,
    ) -> dedup_pb2.CompleteResponse:
        """Client.complete."""
        request = complete_request(namespace, key, fence, outcome, result, ttl_s=ttl_s)
        return await self._call("Complete", request, self.deadline_s)

    async def release(
        self, namespace: str, key: str, fence: int
    ) -> dedup_pb2.ReleaseResponse:
        """Client.release."""
        return await self._call(
            "Release", release_request(namespace, key, fence), self.deadline_s)

    async def renew(
        self, namespace: str, key: str, fence: int, *, lease_ms: int = 0
    ) -> dedup_pb2.RenewResponse:
        """Client.renew."""
        return await self._call(
            "Renew", renew_request(namespace, key, fence, lease_ms=lease_ms),
            self.deadline_s)

    async def checkpoint(
        self, namespace: str, key: str, fence: int, step: str, data: bytes = b"",
        *, lease_ms: int = 0,
    ) -> dedup_pb2.CheckpointResponse:
        """Client.checkpoint."""
        return await self._call(
            "Checkpoint",
            checkpoint_request(namespace, key, fence, step, data, lease_ms=lease_ms),
            self.deadline_s)

    async def get(self, namespace: str, key: str) -> dedup_pb2.GetResponse:
        """Client.get."""
        return await self._call("Get", get_request(namespace, key), self.deadline_s)

    async def forget(self, namespace: str, key: str) -> dedup_pb2.ForgetResponse:
        """Client.forget."""
        return await self._call("Forget", forget_request(namespace, key), self.deadline_s)

    async def begin_batch(
        self, items: Sequence[dedup_pb2.BeginRequest]
    ) -> list[Union[dedup_pb2.BeginResponse, DedupRpcError]]:
        """Client.begin_batch."""
        return await self._batch("BeginBatch", dedup_pb2.BeginBatchRequest, items)

    async def complete_batch(
        self, items: Sequence[dedup_pb2.CompleteRequest]
    ) -> list[Union[dedup_pb2.CompleteResponse, DedupRpcError]]:
        """Client.complete_batch."""
        return await self._batch("CompleteBatch", dedup_pb2.CompleteBatchRequest, items)

    async def checkpoint_batch(
        self, items: Sequence[dedup_pb2.CheckpointRequest]
    ) -> list[Union[dedup_pb2.CheckpointResponse, DedupRpcError]]:
        """Client.checkpoint_batch."""
        return await self._batch("CheckpointBatch", dedup_pb2.CheckpointBatchRequest, items)

    async def _call(
        self,
        method: str,
        request: Any,
        timeout_s: float,
        *,
        retry_unknown: bool = True,
    ) -> Any:
        retry = CallRetry(method, request, self.retry_delay_s, retry_unknown,
                          self.max_attempts)
        await self._update_shard_map()
        for attempt in range(self.max_attempts):
            if attempt > 0:
                await self._sleep(retry.pause_s(attempt))
                await self._update_shard_map()
            via = self._router.route_for(request)
            route = retry.route(via, timeout_s, self.max_leader_hops, attempt)
            try:
                response = await self._attempt(method, request, route, via)
            except grpc.RpcError as e:
                retry.failed(e, route.decision)
                continue
            return retry.answer(response)
        retry.give_up()

    async def _attempt(self, method: str, request: Any, route: AttemptRoute,
                       via: Any) -> Any:
        metadata = (self._token.metadata(),) if self._token is not None else None
        grouped = via is not self._router
        while True:
            try:
                call = getattr(self._router.stub(route.address), method)(
                    request, timeout=route.timeout, metadata=metadata
                )
                response = await call
                if grouped:
                    trailing = await call.trailing_metadata()
            except grpc.RpcError as e:
                if grouped:
                    via.failed_with(e)
                if route.redirected(e):
                    continue
                raise
            route.answered()
            if grouped:
                via.answered_with(trailing)
            return response

    async def _update_shard_map(self) -> None:
        """Client._update_shard_map."""
        shards = self._router.shards
        if not shards.fetch_due() or not shards.start_fetch():
            return
        metadata = (self._token.metadata(),) if self._token is not None else None
        try:
            response = await self._router.cluster_stub(self._router.leader()).ShardMap(
                cluster_pb2.ShardMapRequest(), timeout=self._shard_fetch_timeout_s(),
                metadata=metadata)
        except BaseException as error:  # noqa: BLE001 - routed as before then
            shards.fetch_failed(error)
            if not isinstance(error, Exception):  # cancelled: so is the call
                raise
            return
        shards.fetched(response)

    async def _batch(
        self,
        method: str,
        make_request: Callable[..., Any],
        items: Sequence[Any],
        on_final: Optional[Callable[[int, Any], None]] = None,
    ) -> list[Any]:
        await self._update_shard_map()
        run = BatchRun(method, items, on_final, split=self._router.shards.split(items))
        for attempt in range(self.max_attempts):
            if attempt > 0:
                await self._sleep(self.retry_delay_s(attempt - 1))
            for group in run.groups():
                request = make_request(items=run.items_of(group))
                try:
                    response = await self._call(
                        method, request, self.deadline_s, retry_unknown=False
                    )
                except grpc.RpcError as e:
                    run.failed(group, e)
                    continue
                run.answered(group, response)
            if run.done():
                break
        return run.results()
