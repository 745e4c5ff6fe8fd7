#include "server/shard_map_repair.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_join.h"
#include "common/log.h"

namespace dedup {

LedVoters Disagreeing(const ShardLayout& map, const LedVoters& led) {
  LedVoters out;
  for (const GroupPlacement& group : map.groups) {
    auto it = led.find(group.id);
    if (it == led.end()) continue;
    std::vector<uint64_t> listed = group.replicas;
    std::sort(listed.begin(), listed.end());
    std::vector<uint64_t> voters = it->second;
    std::sort(voters.begin(), voters.end());
    if (listed != voters) out.emplace(group.id, std::move(voters));
  }
  return out;
}

int ShardMapRepair::Look(const ShardLayout& map, const LedVoters& led) {
  LedVoters now = Disagreeing(map, led);
  int published = 0;
  for (const auto& [group_id, voters] : now) {
    auto before = suspects_.find(group_id);
    if (before == suspects_.end() || before->second != voters) continue;
    absl::StatusOr<uint64_t> epoch = publish_(group_id, voters);
    if (epoch.ok()) {
      ++published;
      LogWarning("shard map: group ", group_id,
                 " was listed on other nodes "
                 "than its voters; wrote its voters (",
                 absl::StrJoin(voters, ","), ") at epoch ", *epoch);
    } else {
      LogWarning("shard map: group ", group_id,
                 " is listed on other nodes "
                 "than its voters (",
                 absl::StrJoin(voters, ","),
                 "); writing them failed: ", epoch.status().message());
    }
  }
  suspects_ = std::move(now);
  return published;
}

}  // namespace dedup
