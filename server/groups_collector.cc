#include "server/groups_collector.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/collectors.h"

namespace dedup {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Gauge(std::string name, std::string help, double value) {
  MetricFamily family =
      NewFamily(std::move(name), std::move(help), MetricType::Gauge);
  ClientMetric metric;
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
  return family;
}

// Voters the leader heard from within the election timeout, itself
// included: the replicas that would vote for it now.
int HealthyVoters(const ConsensusStatus& c) {
  int healthy = 0;
  for (const Member& member : c.members) {
    if (member.role != MemberRole::kVoter) continue;
    if (member.id == c.id || member.recently_heard) ++healthy;
  }
  return healthy;
}

// The replicas a group should have: the replication factor, or without
// one (a group formed by joins) the voters it is configured with.
int Wanted(const ConsensusStatus& c, int replication_factor) {
  if (replication_factor > 0) return replication_factor;
  int voters = 0;
  for (const Member& member : c.members) {
    if (member.role == MemberRole::kVoter) ++voters;
  }
  return voters;
}

void AddLag(const GroupReading& group, MetricFamily& lag) {
  const ConsensusStatus& c = group.consensus;
  for (const Member& member : c.members) {
    if (member.id == c.id) continue;
    ClientMetric metric;
    metric.label.push_back({"group", absl::StrCat(group.group_id)});
    metric.label.push_back({"node", absl::StrCat(member.id)});
    metric.gauge.value = static_cast<double>(
        c.last_index > member.match_index ? c.last_index - member.match_index
                                          : 0);
    lag.metric.push_back(std::move(metric));
  }
}

}  // namespace

std::vector<MetricFamily> GroupFamilies(const std::vector<GroupReading>& groups,
                                        uint32_t group_count,
                                        int replication_factor) {
  int led = 0;
  int leaderless = 0;
  int under_replicated = 0;
  MetricFamily lag = NewFamily(
      "dedup_group_follower_lag_entries",
      "Groups this node leads: entries each other member is behind its log",
      MetricType::Gauge);
  for (const GroupReading& group : groups) {
    const ConsensusStatus& c = group.consensus;
    if (c.leader_id == 0) ++leaderless;
    if (c.role != Role::kLeader) continue;
    ++led;
    if (HealthyVoters(c) < Wanted(c, replication_factor)) ++under_replicated;
    AddLag(group, lag);
  }
  std::vector<MetricFamily> out;
  out.push_back(Gauge("dedup_shard_groups",
                      "Raft groups in the cluster's shard layout",
                      group_count));
  out.push_back(Gauge("dedup_groups_hosted",
                      "Raft groups this node hosts a replica of",
                      static_cast<double>(groups.size())));
  out.push_back(Gauge("dedup_groups_led", "Raft groups this node leads", led));
  out.push_back(Gauge("dedup_groups_without_leader",
                      "Hosted Raft groups in which this node knows no leader",
                      leaderless));
  out.push_back(Gauge(
      "dedup_groups_under_replicated",
      "Groups this node leads with fewer voters heard from recently (itself "
      "included) than the replication factor",
      under_replicated));
  out.push_back(std::move(lag));
  return out;
}

std::vector<MetricFamily> GroupsCollector::Collect() const {
  std::vector<GroupReading> readings;
  for (const auto& [id, store] : hosted_()) {
    readings.push_back({id, store->GetClusterStatus().consensus});
  }
  return GroupFamilies(readings, group_count_, replication_factor_);
}

}  // namespace dedup
