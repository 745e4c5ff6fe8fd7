// dedup_raft_* metrics of a node in a replicated group, read at scrape time
// from ReplicatedStore::GetClusterStatus(). With one group: all of them.
// With several (--groups > 1): only the counters, each summed over the
// groups the node hosts at the scrape (a group moved away takes its share
// with it, which Prometheus reads as a counter reset); the gauges of one
// group's state (role, term, indexes, follower lag, snapshot sizing) and
// dedup_raft_leader_changes_total are left out, since one value cannot
// describe many groups (groups_collector.h has the per-node group view).
#ifndef DEDUP_SERVER_CLUSTER_COLLECTOR_H_
#define DEDUP_SERVER_CLUSTER_COLLECTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "replication/replicated_store.h"

namespace dedup {

// The families above from the status of each hosted group; `one_group`:
// the cluster has a single group (statuses holds it). Pure, for tests.
[[nodiscard]] std::vector<prometheus::MetricFamily> ClusterFamilies(
    const std::vector<ClusterStatus>& statuses, bool one_group);

// Thread-safe.
class ClusterCollector : public prometheus::Collectable {
 public:
  using Hosted = std::function<std::map<uint32_t, ReplicatedStore*>()>;

  // One group. Does not own `store`, which must outlive it.
  explicit ClusterCollector(ReplicatedStore* store) : store_(store) {}
  // Several groups: `hosted` lists the stores at each scrape.
  explicit ClusterCollector(Hosted hosted) : hosted_(std::move(hosted)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  ReplicatedStore* const store_ = nullptr;
  const Hosted hosted_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_CLUSTER_COLLECTOR_H_
