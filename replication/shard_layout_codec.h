// The bytes of a ShardLayout as the meta group stores it (a kSetShardMap
// operation, storage/log_entry.h): versioned, little-endian, fixed-width.
// Pure functions; no I/O, no threads.
#ifndef DEDUP_REPLICATION_SHARD_LAYOUT_CODEC_H_
#define DEDUP_REPLICATION_SHARD_LAYOUT_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/shard_layout.h"

namespace dedup {

[[nodiscard]] std::string EncodeShardLayout(const ShardLayout& layout);

// DataLossError on truncated or trailing bytes, an unknown version, or
// counts beyond what the bytes can hold; then ValidateLayout's error (as
// DataLoss) for a layout that decodes but is not valid. Safe on any bytes:
// the meta group's state arrives from other nodes.
[[nodiscard]] absl::StatusOr<ShardLayout> DecodeShardLayout(
    absl::string_view bytes);

}  // namespace dedup

#endif  // DEDUP_REPLICATION_SHARD_LAYOUT_CODEC_H_
