"""Typed, retrying client for the dedup.v1.Dedup service.

Every method returns the server's protobuf response (dedup_pb2.*Response).
Begin/Complete/Release/Renew answers such as IN_USE or STALE_FENCE are OK
responses, not exceptions: inspect `.status`. gRPC errors are raised as
grpc.RpcError with the server's code.

Every call carries a deadline (Begin: deadline + its wait_ms, since the server
may legitimately hold it that long). Only UNAVAILABLE is retried, with
exponential backoff and full jitter: it is the one code the server uses for
"nothing happened, try again". Retries resend the identical request, so a
Begin keeps its owner and a Begin whose answer was lost is re-entered rather
than seen as IN_USE.

Thread-safe: a Client may be shared by threads (the gRPC channel is). It is
not fork-safe: create it after forking.
"""

from __future__ import annotations

import random
import time
from typing import Callable, Optional, Sequence, TypeVar, Union

import grpc

from dedup_client._proto import dedup_pb2, dedup_pb2_grpc
from dedup_client.backoff import Backoff
from dedup_client.batch import item_results
from dedup_client.errors import DedupRpcError

_Response = TypeVar("_Response")


class Client:
    """Client for one dedupd address (or an existing channel)."""

    def __init__(
        self,
        target: Union[str, grpc.Channel],
        deadline_s: float = 5.0,
        max_attempts: int = 5,
        backoff_base_s: float = 0.05,
        backoff_cap_s: float = 2.0,
        *,
        uniform01: Callable[[], float] = random.random,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """target: "host:port" (plaintext channel, owned and closed by close())
        or a grpc.Channel with any credentials (shared, left open).

        deadline_s: per-attempt deadline. max_attempts counts the first try.
        uniform01 and sleep are injectable so tests can pin the jitter.
        """
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        if isinstance(target, str):
            self._channel: grpc.Channel = grpc.insecure_channel(target)
            self._owns_channel = True
        else:
            self._channel = target
            self._owns_channel = False
        self._stub = dedup_pb2_grpc.DedupStub(self._channel)
        self.deadline_s = deadline_s
        self.max_attempts = max_attempts
        self.backoff = Backoff(backoff_base_s, backoff_cap_s)
        self._uniform01 = uniform01
        self._sleep = sleep

    def close(self) -> None:
        """Closes the channel if this client created it."""
        if self._owns_channel:
            self._channel.close()

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
        re-entrant). 0 for lease_ms/ttl_s means the server default; wait_ms > 0
        lets the server wait that long for another owner's outcome.
        """
        request = dedup_pb2.BeginRequest(
            namespace=namespace, key=key, args_hash=args_hash, owner=owner,
            lease_ms=lease_ms, ttl_s=ttl_s, wait_ms=wait_ms,
        )
        return self._call(
            self._stub.Begin, request, self.deadline_s + wait_ms / 1000.0
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
        return self._call(self._stub.Complete, request, self.deadline_s)

    def release(
        self, namespace: str, key: str, fence: int
    ) -> dedup_pb2.ReleaseResponse:
        """Gives the claim back (the side effect certainly did not happen)."""
        request = dedup_pb2.ReleaseRequest(namespace=namespace, key=key, fence=fence)
        return self._call(self._stub.Release, request, self.deadline_s)

    def renew(
        self, namespace: str, key: str, fence: int, *, lease_ms: int = 0
    ) -> dedup_pb2.RenewResponse:
        """Extends the live lease held with `fence` (0: server default)."""
        request = dedup_pb2.RenewRequest(
            namespace=namespace, key=key, fence=fence, lease_ms=lease_ms
        )
        return self._call(self._stub.Renew, request, self.deadline_s)

    def get(self, namespace: str, key: str) -> dedup_pb2.GetResponse:
        """Reads the record without changing it (`.found`, `.record`)."""
        request = dedup_pb2.GetRequest(namespace=namespace, key=key)
        return self._call(self._stub.Get, request, self.deadline_s)

    def forget(self, namespace: str, key: str) -> dedup_pb2.ForgetResponse:
        """Removes the record (administration); fences still never go back."""
        request = dedup_pb2.ForgetRequest(namespace=namespace, key=key)
        return self._call(self._stub.Forget, request, self.deadline_s)

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
        answers IN_USE.
        """
        request = dedup_pb2.BeginBatchRequest(items=items)
        response = self._call(self._stub.BeginBatch, request, self.deadline_s)
        return item_results("BeginBatch", len(items), response.items)

    def complete_batch(
        self, items: Sequence[dedup_pb2.CompleteRequest]
    ) -> list[Union[dedup_pb2.CompleteResponse, DedupRpcError]]:
        """Up to 1000 independent Completes in one call, answered like
        begin_batch. Safe to retry: a Complete resent after it was applied
        answers OK again."""
        request = dedup_pb2.CompleteBatchRequest(items=items)
        response = self._call(self._stub.CompleteBatch, request, self.deadline_s)
        return item_results("CompleteBatch", len(items), response.items)

    def retry_delay_s(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (0 for the first):
        full-jitter backoff with this client's settings and jitter source."""
        return self.backoff.delay(retry, self._uniform01)

    def _call(
        self,
        method: Callable[..., _Response],
        request: object,
        timeout_s: float,
    ) -> _Response:
        last: Optional[grpc.RpcError] = None
        for attempt in range(self.max_attempts):
            if attempt > 0:
                self._sleep(self.retry_delay_s(attempt - 1))
            try:
                return method(request, timeout=timeout_s)
            except grpc.RpcError as e:
                if not is_retryable_rpc_error(e):
                    raise
                last = e
        assert last is not None
        raise last


def rpc_code(error: BaseException) -> Optional[grpc.StatusCode]:
    """The gRPC code of a failed call's error (anything with code()), or
    None for other exceptions."""
    code = getattr(error, "code", None)
    return code() if callable(code) else None


def is_retryable_rpc_error(error: grpc.RpcError) -> bool:
    """True only for UNAVAILABLE: nothing happened, so a retry is safe.

    DEADLINE_EXCEEDED is not retried: the call may have taken effect, and the
    caller's time budget is spent anyway.
    """
    return rpc_code(error) == grpc.StatusCode.UNAVAILABLE
