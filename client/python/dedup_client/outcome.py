"""Calls whose outcome is unknown, and how each may be retried.

A leader that loses its leadership after proposing an operation answers
ABORTED with trailing metadata `dedup-outcome: unknown`: the operation may
still take effect under the next leader. (A batch item in that state is
ABORTED, without metadata.) It is neither "nothing happened" (UNAVAILABLE)
nor a refusal, so it is retried only where a retry is safe:

- Begin with the same owner: re-entrant, answers STARTED with the same fence
  if the first one took effect. An anonymous Begin (no owner) is not
  re-entrant (its retry would answer IN_USE against its own claim), so it is
  not retried.
- Complete with the same fence, outcome and result: OK again if it took
  effect. Renew, Checkpoint, Get and Forget as they are.
- Release: a retry that finds no record means the first one released it, so
  NOT_FOUND is reported as OK.

When retries run out, or a retry is not safe, the caller gets
DedupRpcError(ABORTED) with outcome_unknown=True, never an error that would
read as "nothing happened".
"""

from __future__ import annotations

import grpc

from dedup_client._proto import dedup_pb2
from dedup_client.errors import DedupRpcError, rpc_code, rpc_details
from dedup_client.routing import trailing_value

OUTCOME_METADATA_KEY = "dedup-outcome"


def is_outcome_unknown(error: BaseException) -> bool:
    """True for a call answered ABORTED with `dedup-outcome: unknown`, and
    for the DedupRpcError this client raises for one."""
    if getattr(error, "outcome_unknown", False) is True:
        return True
    return (rpc_code(error) == grpc.StatusCode.ABORTED
            and trailing_value(error, OUTCOME_METADATA_KEY) == "unknown")


def may_retry_unknown(request: object) -> bool:
    """Whether `request` may be sent again after an unknown outcome."""
    if isinstance(request, dedup_pb2.BeginRequest):
        return bool(request.owner)
    return True


def after_unknown(request: object, response: object) -> object:
    """The answer to report for `response`, a retry's answer after an
    unknown outcome: a Release retry that finds no record means the first
    Release took effect."""
    if (isinstance(request, dedup_pb2.ReleaseRequest)
            and isinstance(response, dedup_pb2.ReleaseResponse)
            and response.status == dedup_pb2.ReleaseResponse.NOT_FOUND):
        released = dedup_pb2.ReleaseResponse()
        released.CopyFrom(response)
        released.status = dedup_pb2.ReleaseResponse.OK
        return released
    return response


def outcome_unknown_error(method: str, cause: BaseException) -> DedupRpcError:
    """The error for a call that may or may not have taken effect, with the
    last failure as __cause__."""
    error = DedupRpcError(
        grpc.StatusCode.ABORTED,
        f"{method}: outcome unknown (it may or may not have taken effect): "
        f"{rpc_details(cause)}",
        outcome_unknown=True,
    )
    error.__cause__ = cause
    return error
