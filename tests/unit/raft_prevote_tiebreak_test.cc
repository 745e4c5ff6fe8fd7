// PreVoteTieBreak: of two replicas that ask for pre-votes at once, the one
// with the lower id sets the other's request aside; anything else reaches
// libraft.
#include "replication/raft_prevote_tiebreak.h"

#include "gtest/gtest.h"

namespace dedup {
namespace {

using Self = PreVoteTieBreak::Self;
using Request = PreVoteTieBreak::Request;

// Replica 2 in its pre-vote round for term 8, log 7/100.
Self PreCandidate() {
  Self self;
  self.id = 2;
  self.pre_candidate = true;
  self.term = 7;
  self.round_start_ms = 5'000;
  self.last_log_index = 100;
  self.last_log_term = 7;
  return self;
}

// Replica 3's pre-vote request for term 8 with the same log.
Request FromThree() {
  Request request;
  request.from = 3;
  request.term = 8;
  request.last_log_index = 100;
  request.last_log_term = 7;
  request.pre_vote = true;
  return request;
}

TEST(PreVoteTieBreakTest, APreCandidateSetsAsideAHigherIdsRequest) {
  PreVoteTieBreak tie_break;
  EXPECT_TRUE(tie_break.SetAside(PreCandidate(), FromThree()));
  // A shorter log than ours is set aside too.
  Request shorter = FromThree();
  shorter.last_log_index = 99;
  EXPECT_TRUE(tie_break.SetAside(PreCandidate(), shorter));
}

TEST(PreVoteTieBreakTest, EverythingElseReachesLibraft) {
  PreVoteTieBreak tie_break;
  Self follower = PreCandidate();
  follower.pre_candidate = false;
  EXPECT_FALSE(tie_break.SetAside(follower, FromThree()));
  Request lower = FromThree();
  lower.from = 1;
  EXPECT_FALSE(tie_break.SetAside(PreCandidate(), lower));
  Request real = FromThree();
  real.pre_vote = false;
  EXPECT_FALSE(tie_break.SetAside(PreCandidate(), real));
  Request transfer = FromThree();
  transfer.disrupt_leader = true;
  EXPECT_FALSE(tie_break.SetAside(PreCandidate(), transfer));
  Request later_term = FromThree();
  later_term.term = 9;
  EXPECT_FALSE(tie_break.SetAside(PreCandidate(), later_term));
  // Its log is longer: only it can win.
  Request longer = FromThree();
  longer.last_log_index = 101;
  EXPECT_FALSE(tie_break.SetAside(PreCandidate(), longer));
  Request newer = FromThree();
  newer.last_log_term = 8;
  newer.last_log_index = 50;
  EXPECT_FALSE(tie_break.SetAside(PreCandidate(), newer));
}

TEST(PreVoteTieBreakTest, AReplicaThatAnsweredThisRoundIsNotHeldBack) {
  PreVoteTieBreak tie_break;
  // Replica 3 refused our pre-vote (it still followed the leader), then
  // timed out itself: no tie, its request goes through.
  tie_break.OnPreVoteAnswer(PreCandidate(), 3);
  EXPECT_FALSE(tie_break.SetAside(PreCandidate(), FromThree()));
  // A new round (our timer restarted) forgets the answer.
  Self next = PreCandidate();
  next.round_start_ms += 700;
  EXPECT_TRUE(tie_break.SetAside(next, FromThree()));
  // An answer received while not a pre-candidate counts for no round.
  PreVoteTieBreak fresh;
  Self follower = PreCandidate();
  follower.pre_candidate = false;
  fresh.OnPreVoteAnswer(follower, 3);
  EXPECT_TRUE(fresh.SetAside(PreCandidate(), FromThree()));
}

TEST(PreVoteTieBreakTest, AReplicaIsHeldBackInOneRoundOfATermOnly) {
  PreVoteTieBreak tie_break;
  // Our requests never reach replica 3 (a one-way partition): it never
  // answers, and we stand round after round without winning.
  EXPECT_TRUE(tie_break.SetAside(PreCandidate(), FromThree()));
  EXPECT_TRUE(tie_break.SetAside(PreCandidate(), FromThree()));
  Self next = PreCandidate();
  next.round_start_ms += 700;
  EXPECT_FALSE(tie_break.SetAside(next, FromThree()));
  next.round_start_ms += 900;
  EXPECT_FALSE(tie_break.SetAside(next, FromThree()));
  // A new term is a new tie.
  Self later = PreCandidate();
  later.term = 8;
  later.round_start_ms = 9'000;
  Request asks = FromThree();
  asks.term = 9;
  EXPECT_TRUE(tie_break.SetAside(later, asks));
}

}  // namespace
}  // namespace dedup
