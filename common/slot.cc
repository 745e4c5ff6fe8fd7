#include "common/slot.h"

namespace dedup {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t FnvMix(uint64_t h, absl::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace

uint32_t SlotOf(absl::string_view ns, absl::string_view key) {
  uint64_t h = FnvMix(kFnvOffset, ns);
  h = FnvMix(h, absl::string_view("\0", 1));
  h = FnvMix(h, key);
  return static_cast<uint32_t>(h % kSlotCount);
}

}  // namespace dedup
