// dedup_raft_* metrics of a node in a replicated group, read at scrape time
// from ReplicatedStore::GetClusterStatus().
#ifndef DEDUP_SERVER_CLUSTER_COLLECTOR_H_
#define DEDUP_SERVER_CLUSTER_COLLECTOR_H_

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "replication/replicated_store.h"

namespace dedup {

// Does not own `store`, which must outlive it. Thread-safe.
class ClusterCollector : public prometheus::Collectable {
 public:
  explicit ClusterCollector(ReplicatedStore* store) : store_(store) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  ReplicatedStore* const store_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_CLUSTER_COLLECTOR_H_
