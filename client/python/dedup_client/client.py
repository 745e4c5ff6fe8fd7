"""Typed, retrying client for the dedup.v1.Dedup service, for one dedupd or a
replicated group.

Every method returns the server's protobuf response (dedup_pb2.*Response).
Begin/Complete/Release/Renew answers such as IN_USE or STALE_FENCE are OK
responses, not exceptions: inspect `.status`. gRPC errors are raised as
grpc.RpcError with the server's code.

Every call carries a deadline (Begin: deadline + its wait_ms, since the server
may legitimately hold it that long). UNAVAILABLE is retried, with exponential
backoff and full jitter: it is the one code the server uses for "nothing
happened, try again". Retries resend the identical request, so a Begin keeps
its owner and a Begin whose answer was lost is re-entered rather than seen as
IN_USE.

A tenant over its limits is refused with RESOURCE_EXHAUSTED carrying a
google.rpc.RetryInfo (dedup_client.retry_info): while attempts remain, the
call waits exactly that delay (capped at 30 s, no jitter added) and tries
again, which counts as an attempt; on the last attempt the error is raised
with the server's message. A RESOURCE_EXHAUSTED without RetryInfo (a
message size limit) is raised at once, as before. Batches are re-sent whole.

A replicated group (several addresses): only the leader answers. A
follower's UNAVAILABLE names the leader (trailing metadata `dedup-leader`);
the call goes there at once, without a backoff delay and within the same
attempt's deadline, at most max_leader_hops times per attempt. An
UNAVAILABLE that names no leader, or a node that cannot be reached, moves on
to the next address after the backoff delay. The client remembers the
leader for later calls. A call whose outcome is unknown (ABORTED with
`dedup-outcome: unknown`, after a leader change) is retried only the safe
way (see dedup_client.outcome); if that runs out it raises
DedupRpcError(ABORTED) with outcome_unknown=True.

A sharded cluster (several Raft groups, see dedup_client.shard_routing):
before its first call the client asks its current address for the shard
map (dedup.v1.Cluster/ShardMap); with one, each call goes straight to its
key's group's leader (redirects, retries and the leader guess are then the
group's), and a batch is split into one RPC per group, its answers merged
back in item order (no atomicity across groups). A single node answers
UNIMPLEMENTED, and any failure leaves the calls routed as above.

Security (see dedup_client.security): tls=TlsConfig(root_ca=...,
client_cert=..., client_key=..., server_name=...) opens TLS (mTLS with a
client certificate) channels; token= / token_file= sends
`authorization: Bearer <token>` on every call, batches and leader redirects
included. UNAUTHENTICATED and PERMISSION_DENIED are answers, never retried: they
raise at once with the server's code. A failed TLS handshake is UNAVAILABLE
(nothing happened) and is retried like any other.

Thread-safe: a Client may be shared by threads (the gRPC channels are). It is
not fork-safe: create it after forking.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, Callable, Optional, Sequence, Union

import grpc

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
from dedup_client.policy import (
    AttemptRoute,
    BatchRun,
    CallRetry,
    is_retryable_rpc_error,
)
from dedup_client.security import TlsConfig

Target = Union[str, Sequence[str], grpc.Channel]


class Client(ClientBase):
    """Client for one dedupd address, a replicated group's addresses, or an
    existing channel."""

    def __init__(
        self,
        target: Optional[Target] = None,
        deadline_s: float = 5.0,
        max_attempts: Optional[int] = None,
        backoff_base_s: float = 0.05,
        backoff_cap_s: float = 2.0,
        *,
        max_leader_hops: int = 3,
        channel_factory: Optional[Callable[[str], grpc.Channel]] = None,
        tls: Union[None, bool, TlsConfig] = None,
        token: Optional[str] = None,
        token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        allow_insecure_token: bool = False,
        channel_options: Sequence[tuple[str, Any]] = (),
        uniform01: Callable[[], float] = random.random,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """target: "host:port", a list of them or a comma-separated string
        of them (the nodes of a replicated group; the first is tried first),
        or a grpc.Channel with any credentials (shared, left open); None:
        DEDUP_ADDRESS. Channels to addresses are opened by
        channel_factory (default: plaintext, or TLS with `tls`), on first use, and
        closed by close(); a leader named by a follower gets one too. A
        given grpc.Channel follows such a redirect only with a
        channel_factory.

        deadline_s: per-attempt deadline (leader hops within an attempt share
        it). max_attempts counts the first try; default 5 for one address
        and 10 for a list (a replicated group: retries then span a leader
        election, about 1-2 s, with room to spare). max_leader_hops: redirects
        followed per attempt. uniform01 and sleep are injectable so tests
        can pin the jitter.

        tls: a TlsConfig (root CA, client certificate and key for mTLS,
        server name override; files read here), or True for TLS with the
        system's roots; default plaintext. token (a string) or token_file
        (a file holding it, re-read when it changes): sent as
        `authorization: Bearer <token>` on every call, whatever the channel.
        Without TLS the token goes only to loopback addresses unless
        allow_insecure_token (a token in plaintext can be read on the way).
        channel_options: extra gRPC channel arguments for the channels this
        client opens. tls and channel_options do not combine with a
        grpc.Channel target or a channel_factory (those bring their own
        credentials); a token does.

        Environment (dedup_client.environment): what these arguments leave
        open comes from DEDUP_ADDRESS (no target), and, for channels the
        client opens itself, DEDUP_CA_FILE / DEDUP_CERT_FILE / DEDUP_KEY_FILE
        (tls None) and DEDUP_TOKEN_FILE (neither token nor token_file).
        """
        super().__init__(
            target, deadline_s, max_attempts, backoff_base_s, backoff_cap_s,
            max_leader_hops=max_leader_hops, channel_factory=channel_factory,
            tls=tls, token=token, token_file=token_file,
            allow_insecure_token=allow_insecure_token,
            channel_options=channel_options, uniform01=uniform01,
        )
        self._sleep = sleep

    def close(self) -> None:
        """Closes the channels this client opened (not a given one)."""
        self._router.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def begin(
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
        """Claims (namespace, key): STARTED, IN_USE, CONFLICT, DUPLICATE or
        EXPIRED (it completed so long ago that its record expired: only a
        tombstone says when and how; nothing was started).

        owner: this attempt's id (a UUID); empty is anonymous (never
        re-entrant, so not retried when its outcome is unknown: that raises
        DedupRpcError with outcome_unknown=True). 0 for lease_ms/ttl_s means the server default; wait_ms > 0
        lets the server wait that long for another owner's outcome.
        accept_rerun: on such a tombstone, start the operation again
        (STARTED with a higher fence and `rerun` set) instead of EXPIRED.
        A STARTED answer after an earlier execution recorded progress (a
        takeover, or this owner re-entering) carries it in `checkpoint`.
        """
        request = begin_request(
            namespace, key, args_hash, owner=owner, lease_ms=lease_ms,
            ttl_s=ttl_s, wait_ms=wait_ms, accept_rerun=accept_rerun,
        )
        return self._call("Begin", request, begin_timeout_s(self.deadline_s, request))

    def complete(
        self,
        namespace: str,
        key: str,
        fence: int,
        outcome: int,
        result: bytes = b"",
        *,
        ttl_s: int = 0,
    ) -> dedup_pb2.CompleteResponse:
        """Records SUCCESS or ERROR (dedup_pb2.SUCCESS / dedup_pb2.ERROR) with
        `result` for the execution holding `fence`. ttl_s 0 keeps Begin's TTL."""
        request = complete_request(namespace, key, fence, outcome, result, ttl_s=ttl_s)
        return self._call("Complete", request, self.deadline_s)

    def release(
        self, namespace: str, key: str, fence: int
    ) -> dedup_pb2.ReleaseResponse:
        """Gives the claim back (the side effect certainly did not happen)."""
        request = release_request(namespace, key, fence)
        return self._call("Release", request, self.deadline_s)

    def renew(
        self, namespace: str, key: str, fence: int, *, lease_ms: int = 0
    ) -> dedup_pb2.RenewResponse:
        """Extends the live lease held with `fence` (0: server default)."""
        request = renew_request(namespace, key, fence, lease_ms=lease_ms)
        return self._call("Renew", request, self.deadline_s)

    def checkpoint(
        self, namespace: str, key: str, fence: int, step: str, data: bytes = b"",
        *, lease_ms: int = 0,
    ) -> dedup_pb2.CheckpointResponse:
        """Records the progress of the execution holding `fence`: a step
        name (1..128 printable ASCII bytes) and up to 64 KiB of data. Whoever
        takes the execution over (or the same owner re-entering) gets it in
        BeginResponse.checkpoint. lease_ms > 0 also renews the lease, as
        renew would. STALE_FENCE, NOT_FOUND or ALREADY_COMPLETED: nothing was
        recorded and the claim is lost. Retried like renew after an unknown
        outcome (the same checkpoint again is harmless). A server without it
        raises UNIMPLEMENTED."""
        request = checkpoint_request(namespace, key, fence, step, data, lease_ms=lease_ms)
        return self._call("Checkpoint", request, self.deadline_s)

    def get(self, namespace: str, key: str) -> dedup_pb2.GetResponse:
        """Reads the record without changing it (`.found`, `.record`)."""
        request = get_request(namespace, key)
        return self._call("Get", request, self.deadline_s)

    def forget(self, namespace: str, key: str) -> dedup_pb2.ForgetResponse:
        """Removes the record (administration); fences still never go back."""
        request = forget_request(namespace, key)
        return self._call("Forget", request, self.deadline_s)

    def begin_batch(
        self, items: Sequence[dedup_pb2.BeginRequest]
    ) -> list[Union[dedup_pb2.BeginResponse, DedupRpcError]]:
        """Up to 1000 independent Begins (each with wait_ms 0) in one call.

        Returns one entry per item, in order: its BeginResponse, or a
        DedupRpcError (code() and details() as the item's unary Begin would
        have raised, e.g. INVALID_ARGUMENT "items[2].key: ..."). An invalid
        item does not stop the others. The whole call raises grpc.RpcError on
        a transport or request-level failure (e.g. more than the server's
        --max_batch_items). Retried on UNAVAILABLE like begin, so give every
        item an owner: an anonymous Begin resent after the server applied it
        answers IN_USE. Items answered UNAVAILABLE (the node stopped leading
        before proposing them) or ABORTED (outcome unknown; Begins with an
        owner only) are sent again as a smaller batch after the backoff
        delay, within max_attempts; an item whose outcome is still unknown
        then (or was anonymous) gets DedupRpcError(ABORTED,
        outcome_unknown=True).
        """
        return self._batch("BeginBatch", dedup_pb2.BeginBatchRequest, items)

    def complete_batch(
        self, items: Sequence[dedup_pb2.CompleteRequest]
    ) -> list[Union[dedup_pb2.CompleteResponse, DedupRpcError]]:
        """Up to 1000 independent Completes in one call, answered like
        begin_batch. Safe to retry: a Complete resent after it was applied
        answers OK again (items answered UNAVAILABLE or ABORTED are retried
        as in begin_batch)."""
        return self._batch("CompleteBatch", dedup_pb2.CompleteBatchRequest, items)

    def checkpoint_batch(
        self, items: Sequence[dedup_pb2.CheckpointRequest]
    ) -> list[Union[dedup_pb2.CheckpointResponse, DedupRpcError]]:
        """Up to 1000 independent Checkpoints in one call, answered like
        complete_batch (e.g. INVALID_ARGUMENT "items[1].step: ..."). Safe to
        retry: the same checkpoint again is harmless. The request must fit
        the server's message limit (4 MiB by default; data may be 64 KiB
        per item). A server without CheckpointBatch raises UNIMPLEMENTED
        (CoalescingClient then sends unary Checkpoints)."""
        return self._batch("CheckpointBatch", dedup_pb2.CheckpointBatchRequest, items)

    def _call(
        self,
        method: str,
        request: Any,
        timeout_s: float,
        *,
        retry_unknown: bool = True,
    ) -> Any:
        """Sends `request` to the leader, following redirects and retrying
        UNAVAILABLE (and, with retry_unknown, an unknown outcome where
        that is safe) up to max_attempts (dedup_client.policy.CallRetry)."""
        retry = CallRetry(method, request, self.retry_delay_s, retry_unknown,
                          self.max_attempts)
        self._update_shard_map()
        for attempt in range(self.max_attempts):
            if attempt > 0:
                self._sleep(retry.pause_s(attempt))
                self._update_shard_map()
            via = self._router.route_for(request)
            route = retry.route(via, timeout_s, self.max_leader_hops, attempt)
            try:
                response = self._attempt(method, request, route, via)
            except grpc.RpcError as e:
                retry.failed(e, route.decision)
                continue
            return retry.answer(response)
        retry.give_up()

    def _attempt(self, method: str, request: Any, route: AttemptRoute, via: Any) -> Any:
        """One attempt: the leader guess, then up to max_leader_hops
        redirects at once, all within the attempt's deadline. Raises the last
        UNAVAILABLE (having moved the guess on) or any other error. `via`:
        the Router, or the GroupRoute of the request's key (whose answers'
        trailing metadata it reads)."""
        grouped = via is not self._router
        while True:
            try:
                rpc = getattr(self._router.stub(route.address), method)
                if grouped:
                    response, call = rpc.with_call(request, timeout=route.timeout)
                else:
                    response = rpc(request, timeout=route.timeout)
            except grpc.RpcError as e:
                if grouped:
                    via.failed_with(e)
                if route.redirected(e):
                    continue
                raise
            route.answered()
            if grouped:
                via.answered_with(call.trailing_metadata())
            return response

    def _update_shard_map(self) -> None:
        """Fetches the shard map from the current address when one is due
        (dedup_client.shard_routing); a failure leaves the calls' routing as
        it was."""
        shards = self._router.shards
        if not shards.fetch_due() or not shards.start_fetch():
            return
        try:
            response = self._router.cluster_stub(self._router.leader()).ShardMap(
                cluster_pb2.ShardMapRequest(), timeout=self._shard_fetch_timeout_s())
        except Exception as error:  # noqa: BLE001 - routed as before then
            shards.fetch_failed(error)
            return
        shards.fetched(response)

    def _update_shard_map_later(self) -> None:
        """_update_shard_map without waiting for the answer (a coalescing
        lane's, whose callers must not block)."""
        shards = self._router.shards
        if not shards.fetch_due() or not shards.start_fetch():
            return
        try:
            future = self._router.cluster_stub(self._router.leader()).ShardMap.future(
                cluster_pb2.ShardMapRequest(), timeout=self._shard_fetch_timeout_s())
        except Exception as error:  # noqa: BLE001 - routed as before then
            shards.fetch_failed(error)
            return

        def done(call: Any) -> None:
            error = call.exception()
            if error is not None:
                shards.fetch_failed(error)
            else:
                shards.fetched(call.result())

        future.add_done_callback(done)

    def _batch(
        self, method: str, make_request: Callable[..., Any], items: Sequence[Any]
    ) -> list[Any]:
        """A batch call (dedup_client.policy.BatchRun): items answered
        UNAVAILABLE or ABORTED (where a resend is safe) go again as a smaller
        batch after the backoff delay, as the next attempt; result-budget
        refusals go again at once, without spending an attempt."""
        self._update_shard_map()
        run = BatchRun(method, items, split=self._router.shards.split(items))
        for attempt in range(self.max_attempts):
            if attempt > 0:
                self._sleep(self.retry_delay_s(attempt - 1))
            for group in run.groups():
                request = make_request(items=run.items_of(group))
                try:
                    response = self._call(
                        method, request, self.deadline_s, retry_unknown=False
                    )
                except grpc.RpcError as e:
                    run.failed(group, e)
                    continue
                run.answered(group, response)
            if run.done():
                break
        return run.results()


__all__ = ["Client", "is_retryable_rpc_error"]
