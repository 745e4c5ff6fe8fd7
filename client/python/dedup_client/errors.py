"""Exceptions raised by dedup_client.

gRPC failures are not wrapped: they surface as grpc.RpcError with the
server's code (UNAVAILABLE only after the client's retries), like the C++
client returns them with their code unchanged. The one exception is a call
whose outcome is unknown: DedupRpcError(ABORTED, outcome_unknown=True).
"""

from __future__ import annotations

import datetime
from typing import Any, Optional, Union

import grpc

from dedup_client.enums import Outcome


def rpc_code(error: BaseException) -> Optional[grpc.StatusCode]:
    """The gRPC code of a failed call's error (anything with code()), or
    None for other exceptions."""
    code = getattr(error, "code", None)
    return code() if callable(code) else None


def rpc_details(error: BaseException) -> str:
    """A failed call's details(), or its text when it has no details()."""
    details = getattr(error, "details", None)
    text = details() if callable(details) else None
    return text if text is not None else str(error)


# How a dedupd from before CheckpointBatch answers a dedup.v1 method it does
# not have: its interceptor for unparseable requests rewrote UNIMPLEMENTED.
_OLDER_SERVER_NO_METHOD = "request: cannot be parsed as the request of "


def is_missing_method(error: BaseException) -> bool:
    """Whether a call failed because the server does not have its method:
    UNIMPLEMENTED, or the INVALID_ARGUMENT "request: cannot be parsed as the
    request of ..." of a dedupd older than the method. (A request this client
    sends always parses: its strings are UTF-8 or refused before sending.)"""
    code = rpc_code(error)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return True
    return (code == grpc.StatusCode.INVALID_ARGUMENT
            and rpc_details(error).startswith(_OLDER_SERVER_NO_METHOD))


class DedupError(Exception):
    """Base class of the answers with_idempotency turns into exceptions."""


class RetryableError(Exception):
    """Raise (or subclass) from an idempotent function when its side effect
    certainly did NOT happen: the claim is released, so the next call runs the
    function afresh, and the exception propagates unchanged."""


class ConflictError(DedupError):
    """The key was already used with different arguments (Begin CONFLICT).
    Nothing ran."""

    def __init__(self, namespace: str, key: str, fence: int) -> None:
        super().__init__(
            f"dedup: key {namespace!r}/{key!r} is CONFLICT: already used with "
            f"different arguments (fence {fence})"
        )
        self.namespace = namespace
        self.key = key
        self.fence = fence


class ReplayedError(DedupError):
    """A duplicate of a call whose first run failed permanently: its stored
    error is replayed and the function is NOT run again.

    name and message come from the stored payload ({"name", "message", ...},
    the format every dedup client writes); stored is the whole decoded payload
    (None if it was not a JSON object) and payload the raw bytes.
    """

    def __init__(
        self, name: str, message: str, payload: bytes, fence: int,
        stored: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__(f"{name}: {message} (replayed by dedup, fence {fence})")
        self.name = name
        self.message = message
        self.payload = payload
        self.fence = fence
        self.stored = stored


class OutcomeNotRecordedError(DedupError):
    """Complete was refused (answer: STALE_FENCE, NOT_FOUND or
    ALREADY_COMPLETED): the side effect RAN but its outcome was NOT recorded,
    usually because the lease ran out and another caller took over.

    result holds what the function returned (None on the error path).
    """

    def __init__(
        self, namespace: str, key: str, fence: int, answer: str,
        current_fence: int, result: object = None,
    ) -> None:
        super().__init__(
            f"dedup: Complete for {namespace!r}/{key!r} with fence {fence} "
            f"answered {answer} (current fence {current_fence}): the side "
            "effect ran but its outcome was NOT recorded"
        )
        self.namespace = namespace
        self.key = key
        self.fence = fence
        self.answer = answer
        self.current_fence = current_fence
        self.result = result


class StaleFenceError(OutcomeNotRecordedError):
    """Complete answered STALE_FENCE: another caller took the key over."""


class ClaimLost(OutcomeNotRecordedError):
    """The claim was lost while the function ran: a background renewal of
    its lease, or a claim.checkpoint(), was refused (call: "Renew" or
    "Checkpoint"; answer STALE_FENCE: another caller took the key over;
    NOT_FOUND: the record was forgotten, or expired; ALREADY_COMPLETED:
    another execution completed it).

    Raised by claim.check() and a refused claim.checkpoint() inside the
    function (result None), and by with_idempotency when the function
    returned after the loss (result: its return value): no Complete is sent,
    the outcome is NOT recorded. Whatever the function did may have run
    alongside another execution.
    """

    def __init__(
        self, namespace: str, key: str, fence: int, answer: str,
        current_fence: int, result: object = None, *, call: str = "Renew",
    ) -> None:
        super().__init__(namespace, key, fence, answer, current_fence, result)
        self.call = call
        self.args = (
            f"dedup: the claim on {namespace!r}/{key!r} with fence {fence} was lost "
            f"while the function ran: {call} answered {answer} (current fence "
            f"{current_fence}); its outcome is NOT recorded",
        )


class ExpiredError(DedupError):
    """Begin answered EXPIRED: the operation already ran (completed at
    completed_at_ms with `outcome`, under `fence`) so long ago that its record
    expired. Only a tombstone is kept (until tombstone_expires_at_ms); the
    result is gone. The function was NOT run again, and this is not a
    duplicate: there is nothing to replay. Pass accept_rerun=True to run it
    again where that is acceptable. Times are the server's clock, Unix ms;
    outcome is Outcome.SUCCESS or Outcome.ERROR (an IntEnum: equal to
    dedup_pb2.SUCCESS / ERROR; outcome_name its name)."""

    def __init__(
        self, namespace: str, key: str, fence: int, outcome: int, outcome_name: str,
        created_at_ms: int, completed_at_ms: int, attempts: int,
        tombstone_expires_at_ms: int,
    ) -> None:
        super().__init__(
            f"dedup: key {namespace!r}/{key!r} already ran (outcome {outcome_name}, "
            f"completed at {_utc(completed_at_ms)}, fence {fence}); its record "
            "expired and its result is no longer kept. Not run again: pass "
            "accept_rerun=True to run it again"
        )
        self.namespace = namespace
        self.key = key
        self.fence = fence
        # An Outcome member (an int too); a number this client does not know
        # stays a plain int.
        self.outcome: Union[Outcome, int] = (
            Outcome(outcome) if outcome in Outcome._value2member_map_ else outcome)
        self.outcome_name = outcome_name
        self.created_at_ms = created_at_ms
        self.completed_at_ms = completed_at_ms
        self.attempts = attempts
        self.tombstone_expires_at_ms = tombstone_expires_at_ms


def _utc(ms: int) -> str:
    if ms <= 0:
        return f"{ms} ms"
    stamp = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class InUseTimeoutError(DedupError, TimeoutError):
    """Another owner still held the key when the overall deadline ran out.
    Nothing ran here."""

    def __init__(self, namespace: str, key: str, fence: int) -> None:
        super().__init__(
            f"dedup: key {namespace!r}/{key!r} still IN_USE by another owner "
            f"(fence {fence}) at the deadline"
        )
        self.namespace = namespace
        self.key = key
        self.fence = fence


class DedupRpcError(grpc.RpcError):
    """A gRPC error the client reports without a failed RPC of its own: one
    item of a batch that the server refused, a batch answer that cannot be
    trusted (INTERNAL), or a call whose outcome is unknown. It has code() and
    details() like the grpc.RpcError of a failed call, so
    `except grpc.RpcError` code handles both alike.

    outcome_unknown is True (with code ABORTED) when the call may or may not
    have taken effect: a leader lost its leadership after proposing it and
    the safe retries ran out (or none was safe, e.g. a Begin without an
    owner). Do not treat it as "nothing happened": read the record back
    (get), or retry a Begin with the same owner, a Complete with the same
    fence and result.

    reason is the ItemError.reason of a refused batch item, for programs
    ("" when the server gave none): "RESULT_BUDGET" for a Begin left out of
    an answer that already held the server's --max_batch_response_bytes of
    stored results (nothing happened; ask again in a smaller batch)."""

    def __init__(
        self, code: grpc.StatusCode, details: str, *, outcome_unknown: bool = False,
        reason: str = "",
    ) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details
        self.outcome_unknown = outcome_unknown
        self.reason = reason

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details
