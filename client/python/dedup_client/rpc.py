"""grpc's RpcError and StatusCode with type information.

grpc ships neither stubs nor a py.typed marker, so a user's `mypy --strict`
rejects `import grpc` ("missing library stubs"). Catch and compare through
these names instead: at run time they ARE grpc.RpcError and grpc.StatusCode
(the errors the client raises are instances, DedupRpcError included); for a
type checker they are declared below with what a caller uses."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Optional

import grpc

if TYPE_CHECKING:

    class StatusCode(enum.Enum):
        """grpc.StatusCode."""

        OK = (0, "ok")
        CANCELLED = (1, "cancelled")
        UNKNOWN = (2, "unknown")
        INVALID_ARGUMENT = (3, "invalid argument")
        DEADLINE_EXCEEDED = (4, "deadline exceeded")
        NOT_FOUND = (5, "not found")
        ALREADY_EXISTS = (6, "already exists")
        PERMISSION_DENIED = (7, "permission denied")
        RESOURCE_EXHAUSTED = (8, "resource exhausted")
        FAILED_PRECONDITION = (9, "failed precondition")
        ABORTED = (10, "aborted")
        OUT_OF_RANGE = (11, "out of range")
        UNIMPLEMENTED = (12, "unimplemented")
        INTERNAL = (13, "internal")
        UNAVAILABLE = (14, "unavailable")
        DATA_LOSS = (15, "data loss")
        UNAUTHENTICATED = (16, "unauthenticated")

    class RpcError(Exception):
        """grpc.RpcError as the client raises it (also a grpc.Call)."""

        def code(self) -> StatusCode: ...

        def details(self) -> Optional[str]: ...

        def trailing_metadata(self) -> Any: ...

else:
    StatusCode = grpc.StatusCode
    RpcError = grpc.RpcError

__all__ = ["RpcError", "StatusCode"]
