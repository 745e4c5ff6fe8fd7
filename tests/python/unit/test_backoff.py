"""Backoff: ceilings double from base to cap; full jitter stays in bounds."""

from __future__ import annotations

import random
import unittest

from dedup_client.backoff import Backoff


class BackoffTest(unittest.TestCase):
    def test_ceiling_doubles_until_cap(self) -> None:
        b = Backoff(0.05, 2.0)
        self.assertEqual(
            [b.ceiling(n) for n in range(8)],
            [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])

    def test_huge_and_negative_attempts(self) -> None:
        b = Backoff(0.05, 2.0)
        self.assertEqual(b.ceiling(10**9), 2.0)
        self.assertEqual(b.ceiling(-3), 0.05)
        self.assertEqual(Backoff(5.0, 1.0).ceiling(0), 1.0)  # base above cap
        self.assertEqual(Backoff(0.0, 1.0).ceiling(7), 0.0)

    def test_full_jitter_is_uniform_from_zero_to_ceiling(self) -> None:
        b = Backoff(0.05, 2.0)
        self.assertEqual(b.delay(3, lambda: 0.0), 0.0)
        self.assertAlmostEqual(b.delay(3, lambda: 0.5), 0.2)
        rng = random.Random(7)
        samples = [b.delay(4, rng.random) for _ in range(2000)]
        self.assertTrue(all(0.0 <= s <= 0.8 for s in samples))
        # Full jitter, not "ceiling plus a little": it covers the range.
        self.assertLess(min(samples), 0.05)
        self.assertGreater(max(samples), 0.75)

    def test_out_of_range_random_source_is_clamped(self) -> None:
        b = Backoff(0.05, 2.0)
        self.assertEqual(b.delay(1, lambda: 7.0), 0.1)
        self.assertEqual(b.delay(1, lambda: -1.0), 0.0)


if __name__ == "__main__":
    unittest.main()
