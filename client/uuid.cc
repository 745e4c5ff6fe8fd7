#include "client/uuid.h"

#include <cstdint>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"

namespace dedup {

std::string NewUuidV4(absl::BitGenRef gen) {
  uint64_t high = absl::Uniform<uint64_t>(gen);
  uint64_t low = absl::Uniform<uint64_t>(gen);
  high = (high & ~uint64_t{0xF000}) | uint64_t{0x4000};          // version 4
  low = (low & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);  // variant 1
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", high >> 32,
                         (high >> 16) & 0xFFFF, high & 0xFFFF, low >> 48,
                         low & uint64_t{0xFFFFFFFFFFFF});
}

std::string NewUuidV4() {
  thread_local absl::BitGen gen;
  return NewUuidV4(gen);
}

}  // namespace dedup
