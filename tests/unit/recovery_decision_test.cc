// DecideRecovery: when --recover_as_sole_voter forces, starts as usual or
// refuses, from this node's log and what the other members said.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/recovery.h"

namespace dedup {
namespace {

Member Voter(uint64_t id) {
  Member m;
  m.id = id;
  m.raft_address = "127.0.0.1:" + std::to_string(7000 + id);
  return m;
}

// Node 1's log: last entry term 4 index 100, in a group of three voters.
RaftLogSummary Own() {
  RaftLogSummary own;
  own.current_term = 6;
  own.last_index = 100;
  own.last_term = 4;
  own.max_term = 4;
  own.members = {Voter(1), Voter(2), Voter(3)};
  return own;
}

PeerLogPosition Reached(uint64_t id, uint64_t term, uint64_t index,
                        uint64_t leader = 0) {
  PeerLogPosition p;
  p.id = id;
  p.client_address = "127.0.0.9:1";
  p.reachable = true;
  p.last_log_term = term;
  p.last_index = index;
  p.leader_id = leader;
  return p;
}

PeerLogPosition Down(uint64_t id) {
  PeerLogPosition p;
  p.id = id;
  p.error = "connection refused";
  return p;
}

bool Refused(const absl::StatusOr<RecoveryDecision>& d,
             const std::string& says) {
  return !d.ok() && d.status().message().find(says) != std::string::npos;
}

TEST(DecideRecoveryTest, ForcesWhenEveryoneElseIsGoneOrNotAhead) {
  auto d = DecideRecovery(1, Own(), {Down(2), Down(3)}, false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, RecoveryDecision::kForce);
  EXPECT_TRUE(d->note.empty());
  // The address the group knows node 1 by, from its log.
  EXPECT_EQ(d->address, "127.0.0.1:7001");
  // Equal, shorter, or longer but of an older term: not ahead.
  for (const PeerLogPosition& p :
       {Reached(2, 4, 100), Reached(2, 4, 99), Reached(2, 3, 500)}) {
    d = DecideRecovery(1, Own(), {p, Down(3)}, false);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->kind, RecoveryDecision::kForce);
  }
}

TEST(DecideRecoveryTest, RefusesWhenAReachableMemberIsAhead) {
  EXPECT_TRUE(Refused(DecideRecovery(1, Own(), {Reached(2, 4, 101)}, false),
                      "member 2's log (last entry term 4 index 101) is ahead"));
  EXPECT_TRUE(
      Refused(DecideRecovery(1, Own(), {Down(2), Reached(3, 5, 3)}, false),
              "member 3's log"));
  auto d = DecideRecovery(1, Own(), {Reached(2, 5, 3)}, true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, RecoveryDecision::kForce);
  EXPECT_NE(d->note.find("recovering anyway"), std::string::npos) << d->note;
}

TEST(DecideRecoveryTest, RefusesAGroupThatIsNotLost) {
  // Even when told to ignore logs ahead: a leader means the group lives.
  EXPECT_TRUE(
      Refused(DecideRecovery(1, Own(), {Reached(2, 4, 90, /*leader=*/3)}, true),
              "the group is not lost"));
  PeerLogPosition answered = Down(2);
  answered.refused = true;
  answered.error = "answered permission denied";
  EXPECT_TRUE(Refused(DecideRecovery(1, Own(), {answered}, true),
                      "cannot tell whether the group is lost"));
}

TEST(DecideRecoveryTest, NothingToForceOrNothingToRecoverFrom) {
  RaftLogSummary alone = Own();
  alone.members = {Voter(1), Voter(4)};
  alone.members[1].role = MemberRole::kStandby;
  auto d = DecideRecovery(1, alone, {Down(4)}, false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, RecoveryDecision::kAlreadySole);

  RaftLogSummary empty;
  EXPECT_TRUE(Refused(DecideRecovery(1, empty, {}, false), "log is empty"));
  RaftLogSummary standby = Own();
  standby.members[0].role = MemberRole::kStandby;
  EXPECT_TRUE(Refused(DecideRecovery(1, standby, {Down(2), Down(3)}, false),
                      "is not a voter"));
}

TEST(DecideRecoveryTest, ResetsATermOutOfReachOfTheLog) {
  RaftLogSummary own = Own();
  own.max_term = 4;
  auto d = DecideRecovery(1, own, {}, false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->reset_term, 0u);  // 6 after 4: two elections, fine
  own.current_term = 4 + kMaxTermJump;
  d = DecideRecovery(1, own, {}, false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->reset_term, 0u);
  own.current_term = ~uint64_t{0};
  d = DecideRecovery(1, own, {}, false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->reset_term, 4u);
}

TEST(DecideRecoveryTest, OneShotOnceMembersWereAddedAfterTheForcedOne) {
  RaftLogSummary own = Own();
  own.config_index = 101;  // the forced configuration, then nothing
  EXPECT_TRUE(DecideRecovery(1, own, {Down(2), Down(3)}, false, 101).ok());
  own.config_index = 130;  // members added since
  EXPECT_TRUE(Refused(DecideRecovery(1, own, {Down(2), Down(3)}, false, 101),
                      "already recovered the group"));
  EXPECT_TRUE(DecideRecovery(1, own, {Down(2), Down(3)}, false, 0).ok());
}

TEST(LogIsAheadTest, HigherTermWinsThenLength) {
  EXPECT_TRUE(LogIsAhead(5, 1, 4, 100));
  EXPECT_TRUE(LogIsAhead(4, 101, 4, 100));
  EXPECT_FALSE(LogIsAhead(4, 100, 4, 100));
  EXPECT_FALSE(LogIsAhead(3, 1000, 4, 100));
}

}  // namespace
}  // namespace dedup
