"""dedup_client's enums: the same members and numbers as dedup.proto's, ints
too (IntEnum), and what the package hands out is a member."""

from __future__ import annotations

import enum
import unittest

from dedup_client import (
    BeginStatus,
    ExpiredError,
    FenceStatus,
    IdempotentResult,
    Outcome,
    RecordState,
    dedup_pb2,
)


class EnumsTest(unittest.TestCase):
    def test_members_match_the_proto(self) -> None:
        cases: list[tuple[type[enum.IntEnum], object]] = [
            (Outcome, dedup_pb2.Outcome),
            (RecordState, dedup_pb2.RecordState),
            (BeginStatus, dedup_pb2.BeginResponse.Status),
            (FenceStatus, dedup_pb2.CompleteResponse.Status),
            (FenceStatus, dedup_pb2.ReleaseResponse.Status),
            (FenceStatus, dedup_pb2.RenewResponse.Status),
            (FenceStatus, dedup_pb2.CheckpointResponse.Status),
        ]
        for ours, proto in cases:
            with self.subTest(ours=ours.__name__):
                self.assertEqual({m.name: m.value for m in ours}, dict(proto.items()))  # type: ignore[attr-defined]

    def test_members_are_ints(self) -> None:
        self.assertEqual(Outcome.SUCCESS, dedup_pb2.SUCCESS)
        self.assertEqual(BeginStatus(dedup_pb2.BeginResponse.DUPLICATE), BeginStatus.DUPLICATE)
        self.assertEqual(repr(Outcome(2)), "<Outcome.ERROR: 2>")

    def test_the_package_hands_out_members(self) -> None:
        result: IdempotentResult[int] = IdempotentResult(result=1, duplicate=False, fence=3)
        self.assertIs(result.outcome, Outcome.SUCCESS)
        expired = ExpiredError("ns", "k", 3, dedup_pb2.ERROR, "ERROR", 1, 2, 1, 3)
        self.assertIs(expired.outcome, Outcome.ERROR)
        self.assertEqual(expired.outcome, 2)
        future = ExpiredError("ns", "k", 3, 7, "7", 1, 2, 1, 3)
        self.assertEqual(future.outcome, 7)


if __name__ == "__main__":
    unittest.main()
