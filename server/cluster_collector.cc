#include "server/cluster_collector.h"

#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/collectors.h"

namespace dedup {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily One(std::string name, std::string help, MetricType type,
                 double value) {
  MetricFamily family = NewFamily(std::move(name), std::move(help), type);
  ClientMetric metric;
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

MetricFamily Gauge(std::string name, std::string help, double value) {
  return One(std::move(name), std::move(help), MetricType::Gauge, value);
}

MetricFamily Counter(std::string name, std::string help, double value) {
  return One(std::move(name), std::move(help), MetricType::Counter, value);
}

// The gauges of one group's state, and its leader changes.
void OneGroupFamilies(const ClusterStatus& status,
                      std::vector<MetricFamily>& out) {
  const ConsensusStatus& c = status.consensus;
  MetricFamily role =
      NewFamily("dedup_raft_role", "1 for this node's current Raft role",
                MetricType::Gauge);
  for (Role r :
       {Role::kLeader, Role::kFollower, Role::kCandidate, Role::kUnavailable}) {
    ClientMetric metric;
    metric.label.push_back({"role", RoleName(r)});
    metric.gauge.value = c.role == r ? 1 : 0;
    role.metric.push_back(std::move(metric));
  }
  out.push_back(std::move(role));
  out.push_back(Gauge("dedup_raft_has_leader",
                      "1 when this node knows a leader of its group",
                      c.leader_id != 0 ? 1 : 0));
  out.push_back(Gauge("dedup_raft_term", "Raft term", c.term));
  out.push_back(
      Gauge("dedup_raft_commit_index", "Raft commit index", c.commit_index));
  out.push_back(Gauge("dedup_raft_applied_index",
                      "Log index applied to this node's state",
                      status.state_applied_index));
  out.push_back(Gauge("dedup_raft_last_index",
                      "Last index in this node's Raft log", c.last_index));
  out.push_back(Counter("dedup_raft_leader_changes_total",
                        "Leader changes seen by this node", c.leader_changes));

  MetricFamily lag = NewFamily(
      "dedup_raft_follower_lag_entries",
      "Leader only: entries each other member is behind the leader's log",
      MetricType::Gauge);
  if (c.role == Role::kLeader) {
    for (const Member& member : c.members) {
      if (member.id == c.id) continue;
      ClientMetric metric;
      metric.label.push_back({"node", absl::StrCat(member.id)});
      metric.gauge.value = static_cast<double>(
          c.last_index > member.match_index ? c.last_index - member.match_index
                                            : 0);
      lag.metric.push_back(std::move(metric));
    }
  }
  out.push_back(std::move(lag));
  out.push_back(
      Gauge("dedup_raft_snapshot_threshold_entries",
            "Entries between snapshots, as fitted to --raft_log_budget_mb",
            c.snapshot_threshold));
  out.push_back(
      Gauge("dedup_raft_snapshot_trailing_entries",
            "Entries kept behind a snapshot, as fitted to --raft_log_budget_mb",
            c.snapshot_trailing));
}

// The counters, summed over `statuses`.
void CounterFamilies(const std::vector<ClusterStatus>& statuses,
                     std::vector<MetricFamily>& out) {
  ConsensusStatus c;
  ReplicationCounters n;
  for (const ClusterStatus& status : statuses) {
    c.log_appends += status.consensus.log_appends;
    c.log_appended_entries += status.consensus.log_appended_entries;
    const ReplicationCounters& g = status.counters;
    for (size_t i = 0;
         i < n.leaderless_buckets.size() && i < g.leaderless_buckets.size();
         ++i) {
      n.leaderless_buckets[i] += g.leaderless_buckets[i];
    }
    n.leaderless_sum_s += g.leaderless_sum_s;
    n.entries_proposed += g.entries_proposed;
    n.operations_proposed += g.operations_proposed;
    n.unknown_outcomes += g.unknown_outcomes;
    n.transfer_held_operations += g.transfer_held_operations;
    n.orphaned_operations_answered += g.orphaned_operations_answered;
    n.snapshots_taken += g.snapshots_taken;
    n.snapshots_installed += g.snapshots_installed;
    n.snapshots_sent += g.snapshots_sent;
  }
  out.push_back(Counter(
      "dedup_raft_log_appends_total",
      "Append requests to this node's Raft log, each written and synced (the "
      "backend may merge some into one sync: an upper bound on log fsyncs)",
      c.log_appends));
  out.push_back(Counter("dedup_raft_log_appended_entries_total",
                        "Entries in those append requests",
                        c.log_appended_entries));
  out.push_back(Counter("dedup_raft_entries_proposed_total",
                        "Log entries this node proposed as leader",
                        n.entries_proposed));
  out.push_back(Counter("dedup_raft_operations_proposed_total",
                        "Operations in the entries this node proposed",
                        n.operations_proposed));
  out.push_back(Counter(
      "dedup_raft_unknown_outcomes_total",
      "Operations answered ABORTED with an unknown outcome (leadership lost "
      "after they were proposed)",
      n.unknown_outcomes));
  out.push_back(
      Counter("dedup_raft_transfer_held_operations_total",
              "Operations held, not refused, while a leadership transfer or an "
              "election ran, then proposed or sent to the new leader",
              n.transfer_held_operations));
  out.push_back(Counter(
      "dedup_raft_orphaned_operations_answered_total",
      "Operations whose entry lost its leader in a transfer, answered from "
      "this node's apply of it (not outcome unknown)",
      n.orphaned_operations_answered));
  out.push_back(Counter("dedup_raft_snapshots_taken_total",
                        "Snapshots this node took of its state",
                        n.snapshots_taken));
  out.push_back(Counter("dedup_raft_snapshots_installed_total",
                        "Snapshots this node installed from another node",
                        n.snapshots_installed));
  out.push_back(Counter("dedup_raft_snapshots_sent_total",
                        "Checkpoints this node served to nodes installing a "
                        "snapshot",
                        n.snapshots_sent));

  MetricFamily leaderless =
      NewFamily("dedup_raft_leaderless_seconds",
                "Spells this node went without a known leader (failover time "
                "as this node saw it)",
                MetricType::Histogram);
  ClientMetric histogram;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < n.leaderless_buckets.size(); ++i) {
    cumulative += n.leaderless_buckets[i];
    ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < std::size(kLeaderlessBucketsS)
                             ? kLeaderlessBucketsS[i]
                             : std::numeric_limits<double>::infinity();
    histogram.histogram.bucket.push_back(bucket);
  }
  histogram.histogram.sample_count = cumulative;
  histogram.histogram.sample_sum = n.leaderless_sum_s;
  leaderless.metric.push_back(std::move(histogram));
  out.push_back(std::move(leaderless));
}

}  // namespace

std::vector<MetricFamily> ClusterFamilies(
    const std::vector<ClusterStatus>& statuses, bool one_group) {
  std::vector<MetricFamily> out;
  if (one_group && statuses.size() == 1) OneGroupFamilies(statuses[0], out);
  CounterFamilies(statuses, out);
  return out;
}

std::vector<MetricFamily> ClusterCollector::Collect() const {
  std::vector<ClusterStatus> statuses;
  if (store_ != nullptr) {
    statuses.push_back(store_->GetClusterStatus());
    return ClusterFamilies(statuses, /*one_group=*/true);
  }
  for (const auto& [group, store] : hosted_()) {
    statuses.push_back(store->GetClusterStatus());
  }
  return ClusterFamilies(statuses, /*one_group=*/false);
}

}  // namespace dedup
