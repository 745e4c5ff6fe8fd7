// A RocksDB memtable for databases whose keys start with a 2-byte slot
// (storage_key.h): one small skiplist per slot, kept in slot order, so a
// flush or a scan walks the slots in order instead of sorting the memtable.
//
// Why not RocksDB's own memtables: its skiplist memtable is one big list
// whose searches miss the cache at every level, and its hash skiplist keeps
// buckets in hash order, so every flush had to sort a copy of the memtable
// (docs/decisions.md has the profiles). Here a slot's bucket is its index, so
// bucket order is key order.
//
// Requirements (checked where possible, else documented):
// - The database's comparator is RocksDB's bytewise comparator (a slot's
//   keys sort before the next slot's). Keys shorter than 2 bytes go to the
//   bucket of their first byte and sort first in it, which keeps the order.
// - Single writer: allow_concurrent_memtable_write = false (Insert and
//   Allocate are called by one thread at a time; RocksDB's write path
//   guarantees that for a non-concurrent memtable). Readers (Get, Contains,
//   iterators) may run concurrently with that writer and with each other.
// - No in-place updates (inplace_update_support = false).
#ifndef DEDUP_STORAGE_SLOT_MEMTABLE_H_
#define DEDUP_STORAGE_SLOT_MEMTABLE_H_

#include "rocksdb/memtablerep.h"

namespace dedup {

// Creates memtables as described above. Returns RocksDB's hash skiplist
// factory instead (same bucket count and skiplist height) when this build of
// RocksDB does not lay out its lookup keys as this file expects (checked once
// per process, see slot_memtable.cc); `*fallback_reason` (if not null) then
// says why, for the caller to log. Never null. The caller owns the result.
[[nodiscard]] rocksdb::MemTableRepFactory* NewSlotMemTableRepFactory(
    const char** fallback_reason);

}  // namespace dedup

#endif  // DEDUP_STORAGE_SLOT_MEMTABLE_H_
