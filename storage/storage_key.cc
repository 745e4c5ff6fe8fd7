#include "storage/storage_key.h"

#include "storage/coding.h"

namespace dedup {

std::string EncodeStorageKey(absl::string_view ns, absl::string_view key) {
  const uint32_t slot = SlotOf(ns, key);
  std::string out;
  out.reserve(3 + ns.size() + key.size());
  PutBigEndian16(&out, static_cast<uint16_t>(slot));
  out.push_back(static_cast<char>(ns.size()));
  out.append(ns.data(), ns.size());
  out.append(key.data(), key.size());
  return out;
}

uint32_t SlotOfStorageKey(absl::string_view storage_key) {
  return DecodeBigEndian16(storage_key.data());
}

bool IsRecordKey(absl::string_view storage_key) {
  return storage_key.size() >= 3 &&
         static_cast<unsigned char>(storage_key[0]) < (kSlotCount >> 8);
}

absl::string_view NamespaceOfStorageKey(absl::string_view storage_key) {
  const size_t length = static_cast<unsigned char>(storage_key[2]);
  return storage_key.substr(3, length);
}

std::string FenceReservationKey() {
  return std::string(kMetaPrefix) + "fence_reserved";
}

}  // namespace dedup
