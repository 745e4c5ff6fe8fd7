// dedup_groups_hosted and dedup_groups_led: how many Raft groups this node
// hosts a replica of, and how many of them it leads, read at scrape time.
// Node-level counts, not a series per group: a node may host thousands.
#ifndef DEDUP_SERVER_GROUPS_COLLECTOR_H_
#define DEDUP_SERVER_GROUPS_COLLECTOR_H_

#include <functional>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "replication/replicated_store.h"

namespace dedup {

// Does not own the stores, which must outlive it. `groups` names the
// stores hosted at scrape time (hosting changes while serving); it must be
// thread-safe. Thread-safe.
class GroupsCollector : public prometheus::Collectable {
 public:
  explicit GroupsCollector(
      std::function<std::vector<ReplicatedStore*>()> groups)
      : groups_(std::move(groups)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::function<std::vector<ReplicatedStore*>()> groups_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_GROUPS_COLLECTOR_H_
