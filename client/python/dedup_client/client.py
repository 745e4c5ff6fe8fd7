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

from dedup_client._proto import dedup_pb2
from dedup_client.backoff import Backoff
from dedup_client.batch import (
    holds_result,
    is_result_budget_refusal,
    item_results,
    refit,
    renumber,
)
from dedup_client.errors import DedupRpcError, rpc_code, rpc_details
from dedup_client.outcome import (
    after_unknown,
    is_outcome_unknown,
    may_retry_unknown,
    outcome_unknown_error,
)
from dedup_client.retry_info import server_retry_delay_s
from dedup_client.routing import Router
from dedup_client.security import (
    TlsConfig,
    as_tls_config,
    channel_factory as secure_channel_factory,
    check_token_destination,
    make_token,
)

Target = Union[str, Sequence[str], grpc.Channel]


class Client:
    """Client for one dedupd address, a replicated group's addresses, or an
    existing channel."""

    def __init__(
        self,
        target: Target,
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
        """target: "host:port", a list of them (the nodes of a replicated
        group; the first is tried first), or a grpc.Channel with any
        credentials (shared, left open). Channels to addresses are opened by
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
        """
        if max_attempts is None:
            max_attempts = (
                10 if isinstance(target, (list, tuple)) and len(target) > 1 else 5
            )
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        if max_leader_hops < 0:
            raise ValueError("max_leader_hops must not be negative")
        given_channel = not isinstance(target, (str, list, tuple))
        tls_config = as_tls_config(tls)
        if (tls_config is not None or channel_options) and (
                given_channel or channel_factory is not None):
            raise ValueError(
                "tls and channel_options apply to channels the Client opens: "
                "not with a grpc.Channel target or a channel_factory")
        bearer = make_token(token, token_file)
        if channel_factory is None and not given_channel:
            # Now, not at the first call: a token must not wait for traffic
            # to be refused. (A redirect's address is checked when opened.)
            for address in [target] if isinstance(target, str) else target:
                if isinstance(address, str):  # (Router refuses the others)
                    check_token_destination(
                        address, tls_config, bearer, allow_insecure_token)
            channel_factory = secure_channel_factory(
                tls_config, bearer, allow_insecure_token, channel_options)
        self._router = Router(target, channel_factory, bearer)
        self.deadline_s = deadline_s
        self.max_attempts = max_attempts
        self.max_leader_hops = max_leader_hops
        self.backoff = Backoff(backoff_base_s, backoff_cap_s)
        self._uniform01 = uniform01
        self._sleep = sleep

    @property
    def addresses(self) -> tuple[str, ...]:
        """The addresses given ("" for a given channel)."""
        return self._router.addresses

    def leader_address(self) -> str:
        """The address calls go to now: the last node that answered as the
        leader or was named as it ("" for a given channel)."""
        return self._router.leader()

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
    ) -> dedup_pb2.BeginResponse:
        """Claims (namespace, key): STARTED, IN_USE, CONFLICT or DUPLICATE.

        owner: this attempt's id (a UUID); empty is anonymous (never
        re-entrant, so not retried when its outcome is unknown: that raises
        DedupRpcError with outcome_unknown=True). 0 for lease_ms/ttl_s means the server default; wait_ms > 0
        lets the server wait that long for another owner's outcome.
        """
        request = dedup_pb2.BeginRequest(
            namespace=namespace, key=key, args_hash=args_hash, owner=owner,
            lease_ms=lease_ms, ttl_s=ttl_s, wait_ms=wait_ms,
        )
        return self._call(
            "Begin", request, self.deadline_s + wait_ms / 1000.0
        )

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
        request = dedup_pb2.CompleteRequest(
            namespace=namespace, key=key, fence=fence, outcome=outcome,
            result=result, ttl_s=ttl_s,
        )
        return self._call("Complete", request, self.deadline_s)

    def release(
        self, namespace: str, key: str, fence: int
    ) -> dedup_pb2.ReleaseResponse:
        """Gives the claim back (the side effect certainly did not happen)."""
        request = dedup_pb2.ReleaseRequest(namespace=namespace, key=key, fence=fence)
        return self._call("Release", request, self.deadline_s)

    def renew(
        self, namespace: str, key: str, fence: int, *, lease_ms: int = 0
    ) -> dedup_pb2.RenewResponse:
        """Extends the live lease held with `fence` (0: server default)."""
        request = dedup_pb2.RenewRequest(
            namespace=namespace, key=key, fence=fence, lease_ms=lease_ms
        )
        return self._call("Renew", request, self.deadline_s)

    def get(self, namespace: str, key: str) -> dedup_pb2.GetResponse:
        """Reads the record without changing it (`.found`, `.record`)."""
        request = dedup_pb2.GetRequest(namespace=namespace, key=key)
        return self._call("Get", request, self.deadline_s)

    def forget(self, namespace: str, key: str) -> dedup_pb2.ForgetResponse:
        """Removes the record (administration); fences still never go back."""
        request = dedup_pb2.ForgetRequest(namespace=namespace, key=key)
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

    def retry_delay_s(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (0 for the first):
        full-jitter backoff with this client's settings and jitter source."""
        return self.backoff.delay(retry, self._uniform01)

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
        that is safe) up to max_attempts. Without retry_unknown, an unknown
        outcome is raised as the server's error (the batch calls handle it
        item by item)."""
        last: Optional[BaseException] = None
        unknown = False  # an earlier attempt's outcome is unknown
        server_delay_s: Optional[float] = None  # the last refusal's RetryInfo
        for attempt in range(self.max_attempts):
            if attempt > 0:
                # The server's delay exactly (no jitter on top: it already
                # spreads its tenants' callers), else the backoff.
                self._sleep(server_delay_s if server_delay_s is not None
                            else self.retry_delay_s(attempt - 1))
            server_delay_s = None
            try:
                response = self._attempt(method, request, timeout_s)
            except grpc.RpcError as e:
                if is_retryable_rpc_error(e):
                    last = e
                    continue
                server_delay_s = server_retry_delay_s(e)
                if server_delay_s is not None:
                    # Over a limit (a tenant's): refused before anything
                    # happened, so a retry is safe; the server says when.
                    # (On the last attempt it is raised as it came, or as
                    # an unknown outcome after an earlier one.)
                    last = e
                    continue
                if not (retry_unknown and is_outcome_unknown(e)):
                    if unknown and rpc_code(e) == grpc.StatusCode.ABORTED:
                        raise outcome_unknown_error(method, e) from e
                    raise
                if not may_retry_unknown(request):
                    raise outcome_unknown_error(method, e) from e
                unknown = True
                last = e
                continue
            return after_unknown(request, response) if unknown else response
        assert last is not None
        if unknown:
            raise outcome_unknown_error(method, last) from last
        raise last

    def _attempt(self, method: str, request: Any, timeout_s: float) -> Any:
        """One attempt: the leader guess, then up to max_leader_hops
        redirects at once, all within the attempt's deadline. Raises the last
        UNAVAILABLE (having moved the guess on) or any other error."""
        deadline = time.monotonic() + timeout_s
        address = self._router.leader()
        timeout = timeout_s
        hops = 0
        while True:
            try:
                response = getattr(self._router.stub(address), method)(
                    request, timeout=timeout
                )
            except grpc.RpcError as e:
                if not is_retryable_rpc_error(e):
                    raise
                leader = (self._router.redirect(address, e)
                          if hops < self.max_leader_hops else None)
                if leader is None:
                    self._router.failed(address)
                    raise
                timeout = deadline - time.monotonic()
                if timeout <= 0:  # the next attempt goes to the leader
                    raise
                address = leader
                hops += 1
                continue
            self._router.follow(address)
            return response

    def _batch(
        self, method: str, make_request: Callable[..., Any], items: Sequence[Any]
    ) -> list[Any]:
        """A batch call. Items answered UNAVAILABLE (nothing happened: the
        node stopped leading before proposing them) or ABORTED (outcome
        unknown, where a resend is safe) go again as a smaller batch after
        the backoff delay, as the next attempt.

        Items refused because the answer already held the server's
        --max_batch_response_bytes of stored results go again at once within
        the attempt, in groups of at most as many items as that answer held
        results (batch.refit): not failures, so they spend no attempt. That
        ends: each group is smaller than the batch it came from, and an
        answer that held no result (one result larger than the whole budget)
        makes its refused items ordinary UNAVAILABLEs."""
        results: list[Any] = [None] * len(items)
        unknown = [False] * len(items)  # per item: an earlier outcome unknown
        pending = list(range(len(items)))
        sent = False  # a first RPC that fails has done nothing: it raises
        for attempt in range(self.max_attempts):
            if attempt > 0:
                self._sleep(self.retry_delay_s(attempt - 1))
            groups = [pending]
            retry: list[int] = []
            while groups:
                group = groups.pop(0)
                request = make_request(items=[items[i] for i in group])
                try:
                    response = self._call(
                        method, request, self.deadline_s, retry_unknown=False
                    )
                    answers = item_results(method, len(group), response.items)
                except grpc.RpcError as e:
                    if is_outcome_unknown(e):  # every item's
                        answers = [DedupRpcError(grpc.StatusCode.ABORTED, rpc_details(e))
                                   for _ in group]
                    elif not sent:
                        raise
                    else:  # the resent items keep what their last answer said
                        for i in group:
                            if unknown[i]:
                                results[i] = outcome_unknown_error(
                                    f"{method} items[{i}]", e)
                        continue
                finally:
                    sent = True
                fitted = sum(1 for answer in answers if holds_result(answer))
                refused = []
                for position, (i, answer) in enumerate(zip(group, answers)):
                    code = answer.code() if isinstance(answer, DedupRpcError) else None
                    if code == grpc.StatusCode.ABORTED:
                        unknown[i] = True
                        if not may_retry_unknown(items[i]):
                            results[i] = outcome_unknown_error(f"{method} items[{i}]", answer)
                            continue
                    elif code is None:
                        results[i] = after_unknown(items[i], answer) if unknown[i] else answer
                        continue
                    elif code != grpc.StatusCode.UNAVAILABLE:
                        results[i] = renumber(answer, position, i)
                        continue
                    results[i] = renumber(answer, position, i)
                    if fitted and is_result_budget_refusal(answer):
                        refused.append(i)
                    else:
                        retry.append(i)
                groups[:0] = refit(refused, fitted) if refused else []
            pending = retry
            if not pending:
                return results
        for i in pending:
            if unknown[i]:
                results[i] = outcome_unknown_error(f"{method} items[{i}]", results[i])
        return results


def is_retryable_rpc_error(error: BaseException) -> bool:
    """True only for UNAVAILABLE: nothing happened, so a retry is safe.

    DEADLINE_EXCEEDED is not retried: the call may have taken effect, and the
    caller's time budget is spent anyway.
    """
    return rpc_code(error) == grpc.StatusCode.UNAVAILABLE
