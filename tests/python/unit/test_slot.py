"""slot_of: the shared vectors (tests/vectors/slot.json, computed by the
C++ SlotOf) and FNV-1a 64's published values."""

from __future__ import annotations

import json
import os
import unittest
from pathlib import Path

from dedup_client import slot as slot_module
from dedup_client.slot import SLOT_COUNT, slot_of

VECTORS = Path(
    os.environ.get("DEDUP_SLOT_VECTORS")
    or Path(__file__).resolve().parents[2] / "vectors" / "slot.json"
)


class SlotVectorsTest(unittest.TestCase):
    def test_every_shared_vector(self) -> None:
        vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
        self.assertGreaterEqual(len(vectors), 20)
        for v in vectors:
            with self.subTest(namespace=v["namespace"], key=v["key"]):
                self.assertEqual(slot_of(v["namespace"], v["key"]), v["slot"])

    def test_fnv1a_64_published_values(self) -> None:
        # The FNV reference's test values (offset basis; "a"; "foobar").
        offset = 0xCBF29CE484222325
        self.assertEqual(slot_module._fnv1a(offset, b""), 0xCBF29CE484222325)
        self.assertEqual(slot_module._fnv1a(offset, b"a"), 0xAF63DC4C8601EC8C)
        self.assertEqual(slot_module._fnv1a(offset, b"foobar"), 0x85944171F73967E8)

    def test_separator_and_utf8(self) -> None:
        # "ab"/"c" and "a"/"bc" hash different bytes ("ab\0c" vs "a\0bc").
        self.assertNotEqual(slot_of("ab", "c"), slot_of("a", "bc"))
        whole = slot_module._fnv1a(0xCBF29CE484222325, "ns\x00ключ".encode("utf-8"))
        self.assertEqual(slot_of("ns", "ключ"), whole % SLOT_COUNT)
        self.assertTrue(all(0 <= slot_of("ns", f"k{i}") < SLOT_COUNT for i in range(200)))


if __name__ == "__main__":
    unittest.main()
