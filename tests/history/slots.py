"""Which group of a sharded cluster holds a key: the clients' slot function
(client/python/dedup_client/slot.py, pinned to the server's by
tests/vectors/slot.json), loaded from its file so that no generated stubs
or client package are needed, and a slot-range table built from
Cluster.ShardMap. Stateless apart from the table, which never changes (the
layout is static during a run)."""

from __future__ import annotations

import bisect
import importlib.util
import os

_SLOT_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                        "client", "python", "dedup_client", "slot.py")


def _load_slot_module():
    spec = importlib.util.spec_from_file_location("dedup_slot", _SLOT_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_slot = _load_slot_module()
SLOT_COUNT = _slot.SLOT_COUNT
slot_of = _slot.slot_of


class SlotTable:
    """group_of(namespace, key) from the groups' [first_slot, end_slot)
    ranges (a ShardMap's groups). Thread-safe (read-only)."""

    def __init__(self, ranges: list[tuple[int, int, int]]) -> None:
        """ranges: (first_slot, end_slot, group_id), covering the slots."""
        ranges = sorted(ranges)
        if not ranges or ranges[0][0] != 0 or ranges[-1][1] != SLOT_COUNT or any(
                a[1] != b[0] for a, b in zip(ranges, ranges[1:])):
            raise ValueError(f"ranges do not cover the slots without gaps: {ranges}")
        self._firsts = [r[0] for r in ranges]
        self._groups = [r[2] for r in ranges]

    @property
    def group_ids(self) -> list[int]:
        return sorted(self._groups)

    def group_of(self, namespace: str, key: str) -> int:
        slot = slot_of(namespace, key)
        return self._groups[bisect.bisect_right(self._firsts, slot) - 1]
