// The per-node view of the Raft groups this node hosts, read at scrape time.
// Node-level counts, not a series per group (a node may host thousands),
// except the follower lag of the groups this node leads: each group has one
// leader, so the cluster exports at most groups x (replicas - 1) lag series.
//
//   dedup_shard_groups                 groups in the cluster's layout
//   dedup_groups_hosted                groups this node hosts a replica of
//   dedup_groups_led                   groups this node leads
//   dedup_groups_without_leader        hosted groups with no leader known here
//   dedup_groups_under_replicated      led groups with fewer voters heard
//                                      from recently (this one included) than
//                                      the replication factor
//   dedup_group_follower_lag_entries   {group, node}: led groups only
#ifndef DEDUP_SERVER_GROUPS_COLLECTOR_H_
#define DEDUP_SERVER_GROUPS_COLLECTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "replication/consensus.h"
#include "replication/replicated_store.h"

namespace dedup {

// One hosted group's engine status, as read at scrape time.
struct GroupReading {
  uint32_t group_id = 0;
  ConsensusStatus consensus;
};

// The families above for `groups`; pure, for tests. A replication factor
// <= 0 means each group's configured voter count.
[[nodiscard]] std::vector<prometheus::MetricFamily> GroupFamilies(
    const std::vector<GroupReading>& groups, uint32_t group_count,
    int replication_factor);

// Thread-safe. `hosted` returns the groups this node hosts right now (the
// set may change while the node runs); it and the stores it returns must
// stay valid while the collector is registered.
class GroupsCollector : public prometheus::Collectable {
 public:
  using Hosted = std::function<std::map<uint32_t, ReplicatedStore*>()>;
  GroupsCollector(Hosted hosted, uint32_t group_count, int replication_factor)
      : hosted_(std::move(hosted)),
        group_count_(group_count),
        replication_factor_(replication_factor) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Hosted hosted_;
  const uint32_t group_count_;
  const int replication_factor_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_GROUPS_COLLECTOR_H_
