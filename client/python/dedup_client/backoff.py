"""Exponential backoff with full jitter (the same arithmetic as client/backoff.h).

Delay before retry number n (0-based) is uniform(0, min(cap, base * 2**n)):
full jitter spreads a fleet's retries so they do not arrive in waves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Backoff:
    """Backoff parameters in seconds. Pure and thread-safe."""

    base_s: float = 0.05
    cap_s: float = 2.0

    def ceiling(self, attempt: int) -> float:
        """min(cap, base * 2**attempt); negative attempts count as 0."""
        base = max(self.base_s, 0.0)
        cap = max(self.cap_s, 0.0)
        ceiling = min(base, cap)
        # Doubling step by step stops at the cap, so a huge attempt number
        # costs at most a few dozen iterations and never overflows.
        for _ in range(max(attempt, 0)):
            if ceiling <= 0 or ceiling >= cap:
                break
            ceiling = min(ceiling * 2, cap)
        return ceiling

    def delay(self, attempt: int, uniform01: Callable[[], float]) -> float:
        """Full jitter: ceiling(attempt) * uniform01(), clamped to [0, ceiling].

        uniform01 is the only randomness (e.g. random.random), so tests can
        pin it; a source outside [0, 1) is clamped rather than trusted.
        """
        fraction = min(max(uniform01(), 0.0), 1.0)
        return self.ceiling(attempt) * fraction
