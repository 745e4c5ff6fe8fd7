// Repairs the stored shard map when it disagrees with a group's committed
// membership. Every membership change writes the group's new voters into
// the map before it answers (shard_map_publish.h), but that write can fail
// for good (group 0 without a leader for longer than the write's timeout)
// after the change itself committed; the map would then name the wrong
// replicas until the next change, and clients and forwarders would send
// that group's calls to nodes that no longer host it. So the leader of each
// group compares, on every look of the map watch, the group's voters with
// the adopted map's replicas for it, and writes its voters when the two
// disagree on two looks in a row with the same voters (a single look may
// fall between a change's commit and its own write).
#ifndef DEDUP_SERVER_SHARD_MAP_REPAIR_H_
#define DEDUP_SERVER_SHARD_MAP_REPAIR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "replication/shard_layout.h"

namespace dedup {

// Group id -> its voters as this node, its leader, committed them (sorted).
using LedVoters = std::map<uint32_t, std::vector<uint64_t>>;

// The groups of `led` whose voters differ (as sets) from `map`'s replicas
// for them, with those voters. Groups `map` does not have are left out.
// Pure.
[[nodiscard]] LedVoters Disagreeing(const ShardLayout& map,
                                    const LedVoters& led);

// Not thread-safe: one caller (the map watch's thread).
class ShardMapRepair {
 public:
  // Writes `voters` as `group_id`'s replicas into the stored map (a
  // ShardMapPublisher::Publish); may block for a few seconds.
  using Publish = std::function<absl::StatusOr<uint64_t>(
      uint32_t group_id, const std::vector<uint64_t>& voters)>;
  explicit ShardMapRepair(Publish publish) : publish_(std::move(publish)) {}

  // One look: `map` is the adopted map, `led` the groups this node leads.
  // Publishes each group that disagreed, with the same voters, on the
  // previous look too. Returns how many it published.
  int Look(const ShardLayout& map, const LedVoters& led);

 private:
  const Publish publish_;
  // What disagreed on the previous look.
  LedVoters suspects_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_SHARD_MAP_REPAIR_H_
