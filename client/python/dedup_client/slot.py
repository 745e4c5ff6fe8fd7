"""The slot of a key: which of the 16,384 slots (and so which Raft group of
a sharded cluster) holds (namespace, key). The same function as the server's
(storage/storage_key.h SlotOf) and every client's, pinned by the shared
vectors in tests/vectors/slot.json: FNV-1a 64 over the UTF-8 namespace, one
0x00 byte and the UTF-8 key, modulo 16384. Stateless."""

from __future__ import annotations

SLOT_COUNT = 16384

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def _fnv1a(h: int, data: bytes) -> int:
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def slot_of(namespace: str, key: str) -> int:
    """The slot (0..16383) of (namespace, key)."""
    h = _fnv1a(_FNV_OFFSET, namespace.encode("utf-8"))
    h = _fnv1a(h, b"\x00")
    h = _fnv1a(h, key.encode("utf-8"))
    return h % SLOT_COUNT
