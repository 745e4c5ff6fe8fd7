"""The dedup.v1 enums as Python enums. IntEnum: a member equals its number,
so code comparing with dedup_pb2 constants or plain ints keeps working,
while repr() and .name say what it is (Outcome.SUCCESS, not 1).

The package returns these where it hands out an enum of its own
(IdempotentResult.outcome, ExpiredError.outcome); protobuf responses keep
their int fields, which these wrap: BeginStatus(response.status).
Declared here (not built from the descriptors at run time) so type checkers
see the members; a unit test checks them against dedup.proto."""

from __future__ import annotations

import enum


class Outcome(enum.IntEnum):
    """dedup.v1.Outcome: how a completed operation ended."""

    OUTCOME_UNSPECIFIED = 0
    SUCCESS = 1
    ERROR = 2


class RecordState(enum.IntEnum):
    """dedup.v1.RecordState: Record.state."""

    RECORD_STATE_UNSPECIFIED = 0
    IN_FLIGHT = 1
    COMPLETED = 2


class BeginStatus(enum.IntEnum):
    """dedup.v1.BeginResponse.Status."""

    STATUS_UNSPECIFIED = 0
    STARTED = 1
    IN_USE = 2
    CONFLICT = 3
    DUPLICATE = 4
    EXPIRED = 5


class FenceStatus(enum.IntEnum):
    """The Status of CompleteResponse, ReleaseResponse, RenewResponse and
    CheckpointResponse (the same numbers in each): whether the fence was
    honoured."""

    STATUS_UNSPECIFIED = 0
    OK = 1
    STALE_FENCE = 2
    NOT_FOUND = 3
    ALREADY_COMPLETED = 4
