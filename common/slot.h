// The slot of a (namespace, key): which of the kSlotCount slots a record
// lives in. The server stores each slot as one contiguous key range and the
// cluster assigns slots to Raft groups (Cluster.ShardMap), so smart clients
// compute the same function to send each call to its group's leader.
//
// Stable across versions and languages: the Python and TypeScript clients
// implement it too, and tests/vectors/slot.json holds the shared vectors.
#ifndef DEDUP_COMMON_SLOT_H_
#define DEDUP_COMMON_SLOT_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace dedup {

inline constexpr uint32_t kSlotCount = 16384;

// FNV-1a 64 over namespace, a 0x00 separator, and key; modulo kSlotCount.
// Pure; thread-safe.
[[nodiscard]] uint32_t SlotOf(absl::string_view ns, absl::string_view key);

}  // namespace dedup

#endif  // DEDUP_COMMON_SLOT_H_
