"""The dedup.v1 request messages, built in one place for Client,
AsyncClient and both coalescing clients (so every entry point sends the same
fields with the same defaults)."""

from __future__ import annotations

from dedup_client._proto import dedup_pb2


def begin_request(
    namespace: str, key: str, args_hash: bytes = b"", *, owner: str = "",
    lease_ms: int = 0, ttl_s: int = 0, wait_ms: int = 0, accept_rerun: bool = False,
) -> dedup_pb2.BeginRequest:
    return dedup_pb2.BeginRequest(
        namespace=namespace, key=key, args_hash=args_hash, owner=owner,
        lease_ms=lease_ms, ttl_s=ttl_s, wait_ms=wait_ms, accept_rerun=accept_rerun,
    )


def complete_request(
    namespace: str, key: str, fence: int, outcome: int, result: bytes = b"", *,
    ttl_s: int = 0,
) -> dedup_pb2.CompleteRequest:
    return dedup_pb2.CompleteRequest(
        namespace=namespace, key=key, fence=fence, outcome=outcome, result=result,
        ttl_s=ttl_s,
    )


def release_request(namespace: str, key: str, fence: int) -> dedup_pb2.ReleaseRequest:
    return dedup_pb2.ReleaseRequest(namespace=namespace, key=key, fence=fence)


def renew_request(
    namespace: str, key: str, fence: int, *, lease_ms: int = 0
) -> dedup_pb2.RenewRequest:
    return dedup_pb2.RenewRequest(
        namespace=namespace, key=key, fence=fence, lease_ms=lease_ms)


def checkpoint_request(
    namespace: str, key: str, fence: int, step: str, data: bytes = b"", *,
    lease_ms: int = 0,
) -> dedup_pb2.CheckpointRequest:
    return dedup_pb2.CheckpointRequest(
        namespace=namespace, key=key, fence=fence, step=step, data=data,
        lease_ms=lease_ms)


def get_request(namespace: str, key: str) -> dedup_pb2.GetRequest:
    return dedup_pb2.GetRequest(namespace=namespace, key=key)


def forget_request(namespace: str, key: str) -> dedup_pb2.ForgetRequest:
    return dedup_pb2.ForgetRequest(namespace=namespace, key=key)


def begin_timeout_s(deadline_s: float, request: dedup_pb2.BeginRequest) -> float:
    """A Begin's deadline: the client's, plus the wait it asks the server
    for (the server may legitimately hold it that long)."""
    return deadline_s + request.wait_ms / 1000.0
