"""crash_checker on hand-written histories: each loss or repeat it must
catch across a restart, and the legitimate histories it must accept (calls
cut off by a kill, re-entrant Begins of old claims, batch items). Histories
are built with tests/history/checker_test.py's H."""

from __future__ import annotations

import os
import sys
import unittest

# tests/, for the history package (crash_checker is beside this script).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import crash_checker  # noqa: E402
from history.checker_test import H as FaultH  # noqa: E402


class H(FaultH):
    """A history, checked by crash_checker (with a final read-back from
    time `read_back_t` when given)."""

    def __init__(self, read_back_t=None) -> None:
        super().__init__()
        self.final = None if read_back_t is None else {"read_back_t": read_back_t}

    def batched(self, n: int, batch: str) -> "H":
        """Marks the last n attempts as the items of one batch call."""
        for o in self.ops[-n:]:
            o["batch"] = batch
        return self

    def checks(self) -> list[str]:
        return sorted({v["check"] for v in crash_checker.check(self.ops, self.final).items})


class AcceptsLegalHistories(unittest.TestCase):
    def test_complete_replays_after_restarts(self):
        # Kills at t=3.5 and t=6.5; read back from t=8.
        h = (H(read_back_t=8).started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .get(4, 5, fence=10, result="r")
             .begin(6, 6.2, "b", "DUPLICATE", 10, result="r")
             .get(8, 8.1, fence=10, result="r")
             .begin(8.2, 8.3, "c", "DUPLICATE", 10, result="r"))
        self.assertEqual(h.checks(), [])

    def test_calls_cut_off_by_a_kill_are_unknown(self):
        # a's Begin and Complete were in flight at the kill (t=2.5): the
        # claim may never have existed, so a fresh claim with a lower fence
        # after the restart, and the record not found, are both possible.
        h = (H(read_back_t=9).started(0, 2.6, "a", 10, 1000, outcome="unknown")
             .complete(2.4, 2.7, 10, "r", outcome="unknown")
             .get(4, 5, found=False)
             .started(6, 7, "b", 8, 5000)
             .complete(7, 8, 8, "s")
             .get(9, 9.1, fence=8, result="s")
             .begin(9.2, 9.3, "c", "DUPLICATE", 8, result="s"))
        self.assertEqual(h.checks(), [])

    def test_unknown_batch_items(self):
        # A BeginBatch cut off by the kill: none of its items is a claim.
        h = (H().started(0, 2, "a", 20, 1000, outcome="unknown", key="x")
             .started(0, 2, "b", 21, 1000, outcome="unknown", key="y")
             .batched(2, "b0/1")
             .started(3, 4, "c", 15, 5000, key="x")
             .started(3, 4, "d", 16, 5000, key="y")
             .batched(2, "b0/2"))
        self.assertEqual(h.checks(), [])

    def test_reentrant_begin_of_an_older_claim(self):
        # x's claim (fence 10) is older than y's (12); its owner's retry
        # gets fence 10 again: not a new fence, so not out of order.
        h = (H().started(0, 1, "a", 10, 1000, key="x")
             .started(2, 3, "b", 12, 1000, key="y")
             .started(4, 5, "a", 10, 1000, key="x"))
        self.assertEqual(h.checks(), [])

    def test_timed_out_begin_may_have_issued_the_fence_early(self):
        # a's first Begin timed out (the kill) but took effect with fence
        # 10 before y's claim; its retry after the restart gets 10 again.
        h = (H().started(0, 0.5, "a", 10, 1000, outcome="unknown", key="x")
             .started(1, 2, "b", 12, 1500, key="y")
             .started(3, 4, "a", 10, 1000, key="x"))
        self.assertEqual(h.checks(), [])

    def test_no_read_back_check_without_final(self):
        h = H().started(0, 1, "a", 10, 1000).complete(2, 3, 10, "r")
        self.assertEqual(h.checks(), [])


class CatchesLosses(unittest.TestCase):
    def test_complete_lost_get(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .get(5, 6, found=False))
        self.assertEqual(h.checks(), ["complete_lost"])

    def test_begin_started_after_acknowledged_complete(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .started(5, 6, "b", 11, 9000, attempts=2, takeover=True))
        self.assertIn("complete_lost", h.checks())

    def test_duplicate_with_other_result(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .begin(5, 6, "b", "DUPLICATE", 10, result="r2"))
        self.assertIn("complete_lost", h.checks())

    def test_batch_complete_lost(self):
        h = (H().started(0, 1, "a", 10, 1000, key="x")
             .started(0, 1, "b", 11, 1000, key="y")
             .batched(2, "b0/1")
             .complete(2, 3, 10, "r", key="x")
             .complete(2, 3, 11, "s", key="y")
             .batched(2, "b0/2")
             .begin(5, 6, "c", "DUPLICATE", 10, result="r", key="x")
             .started(5, 6, "d", 30, 9000, key="y")
             .batched(2, "b0/3"))
        got = h.checks()
        self.assertIn("complete_lost", got)
        self.assertEqual(
            {v["key"] for v in crash_checker.check(h.ops).items
             if v["check"] == "complete_lost"}, {"y"})

    def test_fence_repeated_for_a_key(self):
        # After a restart the key's fence is granted again to another owner.
        h = (H().started(0, 1, "a", 10, 1000, lease=100)
             .started(5, 6, "b", 10, 9000, attempts=2, takeover=True))
        self.assertIn("fence_unique", h.checks())

    def test_fence_goes_back_for_a_key(self):
        h = (H().started(0, 1, "a", 10, 1000, lease=100)
             .started(5, 6, "b", 9, 9000, attempts=2, takeover=True))
        self.assertIn("fence_order", h.checks())

    def test_fence_reused_for_another_key(self):
        # Later in real time, so also not above the earlier fence.
        h = (H().started(0, 1, "a", 10, 1000, key="x")
             .started(5, 6, "b", 10, 9000, key="y"))
        self.assertEqual(h.checks(), ["fence_reused", "node_fence_order"])

    def test_fence_reused_concurrently(self):
        # Not ordered in real time, still one fence for two keys.
        h = (H().started(0, 3, "a", 10, 1000, key="x")
             .started(1, 2, "b", 10, 1000, key="y"))
        self.assertEqual(h.checks(), ["fence_reused"])

    def test_node_fence_goes_back(self):
        h = (H().started(0, 1, "a", 10, 1000, key="x")
             .started(5, 6, "b", 7, 9000, key="y"))
        self.assertEqual(h.checks(), ["node_fence_order"])

    def test_node_fence_goes_back_in_a_batch(self):
        h = (H().started(0, 1, "a", 10, 1000, key="x")
             .started(0, 1, "b", 11, 1000, key="y")
             .batched(2, "b0/1")
             .started(5, 6, "c", 12, 9000, key="z")
             .started(5, 6, "d", 4, 9000, key="w")
             .batched(2, "b0/2"))
        self.assertEqual(h.checks(), ["node_fence_order"])

    def test_complete_not_read_back(self):
        h = (H(read_back_t=8).started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .get(4, 5, fence=10, result="r"))
        self.assertEqual(h.checks(), ["not_read_back"])

    def test_complete_read_back_by_get_only(self):
        h = (H(read_back_t=8).started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .get(8, 9, fence=10, result="r"))
        self.assertEqual(h.checks(), ["not_read_back"])


class CountsPowerLosses(unittest.TestCase):
    """crash_checker.power_losses: the --report-loss figures."""

    CUTS = [{"n": 1, "t_cut": 4.0, "t_kill": 4.5}, {"n": 2, "t_cut": 9.0, "t_kill": 9.1}]

    def losses(self, h: H) -> dict:
        return crash_checker.power_losses(h.ops, self.CUTS)

    def test_replayed_complete_is_checked_not_lost(self):
        h = (H().started(0, 1, "a", 10, 1000).complete(2, 3, 10, "r")
             .get(5, 6, fence=10, result="r"))
        got = self.losses(h)
        self.assertEqual((got["acked_completes"], got["acked_completes_checked"],
                          got["acked_completes_lost"]), (1, 1, 0))
        self.assertIsNone(got["lost_age_ms"])

    def test_lost_complete_charged_to_its_cut(self):
        h = (H().started(0, 1, "a", 10, 1000).complete(2, 3, 10, "r")
             .get(5, 6, found=False))
        got = self.losses(h)
        self.assertEqual(got["acked_completes_lost"], 1)
        self.assertEqual(got["lost_by_cycle"], {1: 1})
        self.assertEqual(got["lost_age_ms"]["max"], 1000.0)
        self.assertEqual(got["lost_without_a_cut"], 0)

    def test_acknowledged_after_the_power_went_off(self):
        # Answered by a dedupd still serving after the cut, even after its
        # kill (invoked before it): the first cut lost it, age negative.
        h = (H().started(0, 1, "a", 10, 1000).complete(4.2, 4.6, 10, "r")
             .started(5, 6, "b", 11, 9000, attempts=2, takeover=True))
        got = self.losses(h)
        self.assertEqual(got["lost_by_cycle"], {1: 1})
        self.assertEqual(got["lost_acked_after_power_off"], 1)
        self.assertLess(got["lost_age_ms"]["min"], 0)

    def test_loss_with_no_cut_in_between(self):
        h = (H().started(0, 1, "a", 10, 1000).complete(5, 6, 10, "r")
             .get(7, 8, found=False))
        got = self.losses(h)
        self.assertEqual(got["lost_without_a_cut"], 1)
        self.assertEqual(got["acked_completes_checked"], 0)

    def test_fence_repeats_by_check(self):
        h = (H().started(0, 1, "a", 10, 1000, key="x")
             .started(5, 6, "b", 10, 9000, key="y"))
        self.assertEqual(crash_checker.fence_repeats(crash_checker.check(h.ops)),
                         {"fence_reused": 1, "node_fence_order": 1})


if __name__ == "__main__":
    unittest.main()
