// HandOffTarget: when a group's leader hands leadership to its preferred
// leader.
#include "server/leader_balancer.h"

#include "gtest/gtest.h"

namespace dedup {
namespace {

GroupPlacement Placement() {
  GroupPlacement group;
  group.id = 4;
  group.first_slot = 0;
  group.end_slot = 100;
  group.replicas = {2, 1, 3};  // node 2 is the preferred leader
  return group;
}

// Node 1 leads at index 100; node 2 answered and is caught up.
ConsensusStatus LeaderStatus() {
  ConsensusStatus status;
  status.id = 1;
  status.role = Role::kLeader;
  status.term = 7;
  status.last_index = 100;
  for (uint64_t id : {1, 2, 3}) {
    Member member;
    member.id = id;
    member.match_index = 100;
    member.recently_heard = true;
    status.members.push_back(member);
  }
  return status;
}

TEST(HandOffTargetTest, ALeaderThatIsNotPreferredHandsOver) {
  EXPECT_EQ(HandOffTarget(Placement(), LeaderStatus(), false), 2u);
}

TEST(HandOffTargetTest, APreferredLeaderOrAFollowerKeepsItsRole) {
  ConsensusStatus preferred = LeaderStatus();
  preferred.id = 2;
  EXPECT_EQ(HandOffTarget(Placement(), preferred, false), 0u);
  ConsensusStatus follower = LeaderStatus();
  follower.role = Role::kFollower;
  EXPECT_EQ(HandOffTarget(Placement(), follower, false), 0u);
}

TEST(HandOffTargetTest, NotWhileAHandOffIsPending) {
  EXPECT_EQ(HandOffTarget(Placement(), LeaderStatus(), true), 0u);
}

TEST(HandOffTargetTest, NotToALaggingSilentOrNonVotingPreferredLeader) {
  ConsensusStatus lagging = LeaderStatus();
  lagging.members[1].match_index = 10;
  EXPECT_EQ(HandOffTarget(Placement(), lagging, false), 0u);
  ConsensusStatus never = LeaderStatus();
  never.last_index = 1;
  never.members[1].match_index = 0;
  EXPECT_EQ(HandOffTarget(Placement(), never, false), 0u);
  ConsensusStatus silent = LeaderStatus();
  silent.members[1].recently_heard = false;
  EXPECT_EQ(HandOffTarget(Placement(), silent, false), 0u);
  ConsensusStatus standby = LeaderStatus();
  standby.members[1].role = MemberRole::kStandby;
  EXPECT_EQ(HandOffTarget(Placement(), standby, false), 0u);
  // A few entries behind under load still counts as caught up.
  ConsensusStatus close = LeaderStatus();
  close.members[1].match_index = 90;
  EXPECT_EQ(HandOffTarget(Placement(), close, false), 2u);
}

}  // namespace
}  // namespace dedup
