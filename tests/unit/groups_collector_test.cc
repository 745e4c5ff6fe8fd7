// GroupFamilies: the per-node group counts and the led groups' lag series
// that the group alerts (deploy/prometheus/alert_rules.yml) read.
#include "server/groups_collector.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace dedup {
namespace {

Member Voter(uint64_t id, uint64_t match, bool heard) {
  Member m;
  m.id = id;
  m.match_index = match;
  m.recently_heard = heard;
  return m;
}

GroupReading Led(uint32_t group, uint64_t last, std::vector<Member> members) {
  GroupReading r;
  r.group_id = group;
  r.consensus.id = 1;
  r.consensus.role = Role::kLeader;
  r.consensus.leader_id = 1;
  r.consensus.last_index = last;
  r.consensus.members = std::move(members);
  return r;
}

GroupReading Following(uint32_t group, uint64_t leader) {
  GroupReading r;
  r.group_id = group;
  r.consensus.id = 1;
  r.consensus.role = leader == 0 ? Role::kCandidate : Role::kFollower;
  r.consensus.leader_id = leader;
  r.consensus.members = {Voter(1, 0, false), Voter(2, 0, false)};
  return r;
}

// name -> value of the unlabelled gauges; lag as "group/node" -> value.
struct Scraped {
  std::map<std::string, double> gauges;
  std::map<std::string, double> lag;
};

Scraped Scrape(const std::vector<GroupReading>& groups, int rf) {
  Scraped out;
  for (const auto& family : GroupFamilies(groups, 12, rf)) {
    for (const auto& metric : family.metric) {
      if (family.name == "dedup_group_follower_lag_entries") {
        EXPECT_EQ(metric.label.size(), 2u);
        out.lag[metric.label[0].value + "/" + metric.label[1].value] =
            metric.gauge.value;
      } else {
        out.gauges[family.name] = metric.gauge.value;
      }
    }
  }
  return out;
}

TEST(GroupFamiliesTest, CountsHostedLedLeaderlessAndUnderReplicated) {
  const Scraped s = Scrape(
      {Led(0, 100,
           {Voter(1, 100, true), Voter(2, 90, true), Voter(3, 40, true)}),
       // Node 3 silent: 2 of 3 voters heard.
       Led(4, 50,
           {Voter(1, 50, true), Voter(2, 50, true), Voter(3, 10, false)}),
       Following(5, 2), Following(7, 0)},
      3);
  EXPECT_EQ(s.gauges.at("dedup_shard_groups"), 12);
  EXPECT_EQ(s.gauges.at("dedup_groups_hosted"), 4);
  EXPECT_EQ(s.gauges.at("dedup_groups_led"), 2);
  EXPECT_EQ(s.gauges.at("dedup_groups_without_leader"), 1);
  EXPECT_EQ(s.gauges.at("dedup_groups_under_replicated"), 1);
}

TEST(GroupFamiliesTest, LagSeriesOnlyForLedGroupsAndNeverForSelf) {
  const Scraped s = Scrape(
      {Led(0, 100,
           {Voter(1, 100, true), Voter(2, 90, true), Voter(3, 120, true)}),
       Following(5, 2)},
      3);
  // A member ahead of the leader's view (a stale match) reads 0, not a wrap.
  EXPECT_EQ(s.lag, (std::map<std::string, double>{{"0/2", 10}, {"0/3", 0}}));
}

TEST(GroupFamiliesTest, ALeaderShortOfVotersIsUnderReplicated) {
  // Two voters and a standby where three are wanted.
  GroupReading r =
      Led(3, 10, {Voter(1, 10, true), Voter(2, 10, true), Voter(3, 10, true)});
  r.consensus.members[2].role = MemberRole::kStandby;
  EXPECT_EQ(Scrape({r}, 3).gauges.at("dedup_groups_under_replicated"), 1);
  // Without a replication factor, the configured voters are what is wanted.
  EXPECT_EQ(Scrape({r}, 0).gauges.at("dedup_groups_under_replicated"), 0);
}

}  // namespace
}  // namespace dedup
