// The receiving side of dedup.v1.Cluster/FetchCheckpoint: copies another
// node's checkpoint into a local directory.
#ifndef DEDUP_SERVER_CHECKPOINT_FETCH_H_
#define DEDUP_SERVER_CHECKPOINT_FETCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/channel_security.h"

namespace dedup {

// Fetches a checkpoint covering at least `min_applied_index` from the node
// serving clients at `address`, over a channel from `open` (TLS and the
// node's token, see --peer_token_file), into `dir` (created; it must not
// exist), and makes every file and the directory durable. Returns the
// checkpoint's applied index. Blocks the calling thread for the whole transfer,
// at most `timeout`. On error `dir` may hold part of a copy: remove it.
[[nodiscard]] absl::StatusOr<uint64_t> FetchCheckpoint(
    const ChannelFactory& open, const std::string& address,
    uint64_t min_applied_index, const std::string& dir, absl::Duration timeout);

}  // namespace dedup

#endif  // DEDUP_SERVER_CHECKPOINT_FETCH_H_
