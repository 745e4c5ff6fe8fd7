// ClusterFamilies: with one group every dedup_raft_* family describes it;
// with several, only the counters remain, each the sum over the groups.
#include "server/cluster_collector.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dedup {
namespace {

ClusterStatus Status(uint64_t scale, Role role) {
  ClusterStatus s;
  s.consensus.id = 1;
  s.consensus.role = role;
  s.consensus.leader_id = role == Role::kLeader ? 1 : 2;
  s.consensus.term = 7 * scale;
  s.consensus.commit_index = 100 * scale;
  s.consensus.last_index = 100 * scale;
  s.consensus.leader_changes = 3 * scale;
  s.consensus.log_appends = 10 * scale;
  s.consensus.log_appended_entries = 20 * scale;
  s.state_applied_index = 100 * scale;
  s.counters.entries_proposed = 5 * scale;
  s.counters.operations_proposed = 50 * scale;
  s.counters.unknown_outcomes = scale;
  s.counters.snapshots_taken = 2 * scale;
  s.counters.ObserveLeaderless(0.5 * static_cast<double>(scale));
  return s;
}

// name -> value of each family's first sample (a histogram: its count).
std::map<std::string, double> Values(const std::vector<ClusterStatus>& groups,
                                     bool one_group) {
  std::map<std::string, double> out;
  for (const auto& family : ClusterFamilies(groups, one_group)) {
    if (family.metric.empty()) {
      out[family.name] = -1;
      continue;
    }
    const auto& m = family.metric.front();
    switch (family.type) {
      case prometheus::MetricType::Counter:
        out[family.name] = m.counter.value;
        break;
      case prometheus::MetricType::Histogram:
        out[family.name] = static_cast<double>(m.histogram.sample_count);
        out[family.name + "_sum"] = m.histogram.sample_sum;
        break;
      default:
        out[family.name] = m.gauge.value;
    }
  }
  return out;
}

TEST(ClusterFamiliesTest, OneGroupExportsItsStateAndCounters) {
  auto v = Values({Status(1, Role::kLeader)}, /*one_group=*/true);
  EXPECT_EQ(v.at("dedup_raft_term"), 7);
  EXPECT_EQ(v.at("dedup_raft_has_leader"), 1);
  EXPECT_EQ(v.at("dedup_raft_applied_index"), 100);
  EXPECT_EQ(v.at("dedup_raft_leader_changes_total"), 3);
  EXPECT_EQ(v.at("dedup_raft_log_appends_total"), 10);
  EXPECT_EQ(v.at("dedup_raft_operations_proposed_total"), 50);
  EXPECT_EQ(v.at("dedup_raft_leaderless_seconds"), 1);
  EXPECT_TRUE(v.count("dedup_raft_role"));
  EXPECT_TRUE(v.count("dedup_raft_snapshot_threshold_entries"));
}

TEST(ClusterFamiliesTest, ManyGroupsSumTheCountersAndLeaveOutOneGroupsState) {
  auto v = Values({Status(1, Role::kLeader), Status(2, Role::kFollower),
                   Status(4, Role::kFollower)},
                  /*one_group=*/false);
  EXPECT_EQ(v.at("dedup_raft_log_appends_total"), 70);
  EXPECT_EQ(v.at("dedup_raft_log_appended_entries_total"), 140);
  EXPECT_EQ(v.at("dedup_raft_entries_proposed_total"), 35);
  EXPECT_EQ(v.at("dedup_raft_operations_proposed_total"), 350);
  EXPECT_EQ(v.at("dedup_raft_unknown_outcomes_total"), 7);
  EXPECT_EQ(v.at("dedup_raft_snapshots_taken_total"), 14);
  EXPECT_EQ(v.at("dedup_raft_leaderless_seconds"), 3);
  EXPECT_DOUBLE_EQ(v.at("dedup_raft_leaderless_seconds_sum"), 3.5);
  for (const char* name :
       {"dedup_raft_role", "dedup_raft_has_leader", "dedup_raft_term",
        "dedup_raft_commit_index", "dedup_raft_applied_index",
        "dedup_raft_last_index", "dedup_raft_follower_lag_entries",
        "dedup_raft_snapshot_threshold_entries",
        "dedup_raft_snapshot_trailing_entries",
        "dedup_raft_leader_changes_total"}) {
    EXPECT_EQ(v.count(name), 0u) << name;
  }
}

// A node hosting no group at the scrape: the counters read 0.
TEST(ClusterFamiliesTest, NoGroupHostedReadsZero) {
  auto v = Values({}, /*one_group=*/false);
  EXPECT_EQ(v.at("dedup_raft_log_appends_total"), 0);
  EXPECT_EQ(v.at("dedup_raft_leaderless_seconds"), 0);
  EXPECT_EQ(v.count("dedup_raft_term"), 0u);
}

}  // namespace
}  // namespace dedup
