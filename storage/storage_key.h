// Layout of the RocksDB keys. A record lives at
//   [slot u16 big-endian][namespace length u8][namespace][key]
// so each of the 16384 slots is one contiguous key range (cheap to scan, move
// or delete when the cluster map changes). Node-wide metadata lives under a
// 0xFF 0xFF prefix, above every slot.
#ifndef DEDUP_STORAGE_STORAGE_KEY_H_
#define DEDUP_STORAGE_STORAGE_KEY_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
// SlotOf and kSlotCount, shared with the clients.
#include "common/slot.h"

namespace dedup {

// Requires ns.size() <= 255 (validated upstream).
[[nodiscard]] std::string EncodeStorageKey(absl::string_view ns,
                                           absl::string_view key);

// The slot encoded in a record key. Requires IsRecordKey(storage_key).
[[nodiscard]] uint32_t SlotOfStorageKey(absl::string_view storage_key);

// True for keys written by EncodeStorageKey (not metadata).
[[nodiscard]] bool IsRecordKey(absl::string_view storage_key);

// The namespace encoded in a record key (a view into it). Requires
// IsRecordKey(storage_key); a length past the key's end is cut to it.
[[nodiscard]] absl::string_view NamespaceOfStorageKey(
    absl::string_view storage_key);

// First key after every record key: metadata keys start here.
inline constexpr absl::string_view kMetaPrefix("\xff\xff", 2);

// The node-wide fence reservation (see FenceAllocator).
[[nodiscard]] std::string FenceReservationKey();

}  // namespace dedup

#endif  // DEDUP_STORAGE_STORAGE_KEY_H_
