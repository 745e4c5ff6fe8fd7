// The receiving side of dedup.v1.Cluster/FetchCheckpoint: copies another
// node's checkpoint into a local directory.
#ifndef DEDUP_SERVER_CHECKPOINT_FETCH_H_
#define DEDUP_SERVER_CHECKPOINT_FETCH_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/channel_security.h"

namespace dedup {

// How long a transfer may take. A transfer is bounded by its progress, so
// that a source that stops (or stops sending) is given up quickly whatever
// the state's size, while a slow but moving one is not.
struct FetchLimits {
  // Fails when no byte arrived for this long (the first one included).
  absl::Duration stall = absl::Seconds(10);
  // Fails after this long in any case.
  absl::Duration total = absl::Hours(6);
};

// Fetches a checkpoint of group `group_id`'s state covering at least
// `min_applied_index` from the node serving clients at `address`, over a
// channel from `open` (TLS and the node's token, see --peer_token_file), into
// `dir` (created; it must not exist), and makes every file and the directory
// durable. Returns the checkpoint's applied index. Blocks the calling thread
// for the transfer, within `limits`; CANCELLED soon after `*cancelled` (if not
// null) becomes true. On error `dir` may hold part of a copy: remove it.
[[nodiscard]] absl::StatusOr<uint64_t> FetchCheckpoint(
    const ChannelFactory& open, const std::string& address, uint32_t group_id,
    uint64_t min_applied_index, const std::string& dir,
    const FetchLimits& limits, const std::atomic<bool>* cancelled);

// Bytes of group `group_id`'s checkpoint files this process received (every
// FetchCheckpoint, whole or not) since it started: what copying that
// group's state to this node cost. Thread-safe.
[[nodiscard]] uint64_t CheckpointBytesFetched(uint32_t group_id);

}  // namespace dedup

#endif  // DEDUP_SERVER_CHECKPOINT_FETCH_H_
