"""Test doubles for unit tests only (integration tests use the real dedupd)."""

from __future__ import annotations

from typing import Any, Callable

import grpc

from dedup_client import dedup_pb2


class FakeRpcError(grpc.RpcError):
    """What a failed grpc call raises: an RpcError with code()."""

    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code.name)
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


class FakeChannel:
    """A grpc.Channel stand-in whose unary calls follow a script: each entry is
    a response to return or an exception to raise."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.calls: list[tuple[str, Any, float]] = []

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        def call(request: Any, timeout: float | None = None, **_: Any) -> Any:
            self.calls.append((method, request, timeout))
            item = self.script.pop(0)
            if isinstance(item, BaseException):
                raise item
            return item

        return call

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        """The generated stub binds every method, Dedup.Session included; the
        Python client does not use the stream (yet), so calling it fails."""

        def call(*_: Any, **__: Any) -> Any:
            raise AssertionError(f"unexpected stream call {method}")

        return call

    def close(self) -> None:
        pass


class ScriptedClient:
    """Duck-typed dedup_client.Client: answers Begin from a script and records
    every call, so the mapping from answers to behaviour can be pinned."""

    def __init__(
        self,
        begins: list[dedup_pb2.BeginResponse],
        complete_status: int = dedup_pb2.CompleteResponse.OK,
        checkpoint_status: int = dedup_pb2.CheckpointResponse.OK,
    ) -> None:
        self.begins = list(begins)
        self.complete_status = complete_status
        self.checkpoint_status = checkpoint_status
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def begin(self, namespace: str, key: str, args_hash: bytes = b"", **kw: Any):
        self.calls.append(("begin", dict(namespace=namespace, key=key, args_hash=args_hash, **kw)))
        return self.begins.pop(0)

    def complete(self, namespace: str, key: str, fence: int, outcome: int,
                 result: bytes = b"", **kw: Any):
        self.calls.append(("complete", dict(key=key, fence=fence, outcome=outcome, result=result)))
        return dedup_pb2.CompleteResponse(status=self.complete_status, fence=fence + 1)

    def release(self, namespace: str, key: str, fence: int):
        self.calls.append(("release", dict(key=key, fence=fence)))
        return dedup_pb2.ReleaseResponse(status=dedup_pb2.ReleaseResponse.OK)

    def checkpoint(self, namespace: str, key: str, fence: int, step: str,
                   data: bytes = b"", *, lease_ms: int = 0):
        self.calls.append(("checkpoint", dict(key=key, fence=fence, step=step, data=data,
                                              lease_ms=lease_ms)))
        stale = self.checkpoint_status == dedup_pb2.CheckpointResponse.STALE_FENCE
        return dedup_pb2.CheckpointResponse(
            status=self.checkpoint_status, fence=fence + 1 if stale else fence)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def started(fence: int = 7, takeover: bool = False, **fields: Any) -> dedup_pb2.BeginResponse:
    return dedup_pb2.BeginResponse(
        status=dedup_pb2.BeginResponse.STARTED, fence=fence, takeover=takeover,
        **{"attempts": 1, **fields})


def expired(outcome: int, fence: int = 7, completed_at: int = 0) -> dedup_pb2.BeginResponse:
    return dedup_pb2.BeginResponse(
        status=dedup_pb2.BeginResponse.EXPIRED, fence=fence, outcome=outcome,
        created_at=completed_at - 5, completed_at=completed_at, attempts=1,
        tombstone_expires_at=completed_at + 1000)


def duplicate(outcome: int, result: bytes, fence: int = 7) -> dedup_pb2.BeginResponse:
    return dedup_pb2.BeginResponse(
        status=dedup_pb2.BeginResponse.DUPLICATE, fence=fence, outcome=outcome, result=result)


def in_use(retry_after_ms: int = 20) -> dedup_pb2.BeginResponse:
    return dedup_pb2.BeginResponse(
        status=dedup_pb2.BeginResponse.IN_USE, fence=7, retry_after_ms=retry_after_ms)


def conflict() -> dedup_pb2.BeginResponse:
    return dedup_pb2.BeginResponse(status=dedup_pb2.BeginResponse.CONFLICT, fence=7)
