// Random (version 4) UUIDs for Begin owners.
#ifndef DEDUP_CLIENT_UUID_H_
#define DEDUP_CLIENT_UUID_H_

#include <string>

#include "absl/random/bit_gen_ref.h"

namespace dedup {

// Returns a lowercase RFC 4122 version 4 UUID, e.g.
// "1b4e28ba-2fa1-41d2-883f-0016d3cca427", drawing 122 random bits from `gen`.
[[nodiscard]] std::string NewUuidV4(absl::BitGenRef gen);

// As above with a per-thread generator seeded from the OS. Thread-safe.
[[nodiscard]] std::string NewUuidV4();

}  // namespace dedup

#endif  // DEDUP_CLIENT_UUID_H_
