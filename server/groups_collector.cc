#include "server/groups_collector.h"

#include <string>
#include <utility>

#include "server/collectors.h"

namespace dedup {
namespace {

prometheus::MetricFamily Gauge(std::string name, std::string help,
                               double value) {
  prometheus::MetricFamily family = NewFamily(std::move(name), std::move(help),
                                              prometheus::MetricType::Gauge);
  prometheus::ClientMetric metric;
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace

std::vector<prometheus::MetricFamily> GroupsCollector::Collect() const {
  const std::vector<ReplicatedStore*> groups = groups_();
  int led = 0;
  for (ReplicatedStore* group : groups) {
    if (group->GetClusterStatus().consensus.role == Role::kLeader) ++led;
  }
  std::vector<prometheus::MetricFamily> out;
  out.push_back(Gauge("dedup_groups_hosted",
                      "Raft groups this node hosts a replica of",
                      static_cast<double>(groups.size())));
  out.push_back(Gauge("dedup_groups_led", "Raft groups this node leads", led));
  return out;
}

}  // namespace dedup
