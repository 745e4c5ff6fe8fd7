// Which of two replicas that stand for election at the same moment goes
// first: the one with the lower id.
//
// When a group's leader dies, its two surviving replicas each wait out a
// randomized election timeout, then ask for pre-votes. Usually one asks
// first and the other, still following the dead leader, refuses; the other
// then times out, asks, gets the first's pre-vote and wins. But when the two
// time out within a message's delivery time of each other, each grants the
// other a pre-vote (neither follows a leader any more), both start a real
// election in the same term, each votes for itself, and neither wins: the
// group waits another whole randomized timeout. The busier the nodes, the
// longer delivery takes and the likelier the tie: a loop shared by many
// groups handles their messages one after another.
//
// The tie-break: a pre-candidate sets aside (drops, as a lossy network
// would; safe in Raft) a pre-vote request from a higher-id replica for the
// same term whose log is no longer than its own, unless that replica has
// already answered its own pre-vote request of this round. The higher one
// grants the lower one's pre-vote (its log is not behind), so the lower one
// wins; a replica that answered first (it still followed the leader) asked
// after the lower one's round began, as in an election without a tie, and
// is not held back. A replica is held back in one round of a term only:
// when the lower one cannot win (its requests are lost on the way, a
// one-way partition), its later rounds let the higher one's requests
// through, so the group still elects a leader.
//
// Thread safety: not thread-safe; the group's loop thread only.
#ifndef DEDUP_REPLICATION_RAFT_PREVOTE_TIEBREAK_H_
#define DEDUP_REPLICATION_RAFT_PREVOTE_TIEBREAK_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace dedup {

class PreVoteTieBreak {
 public:
  // This replica as libraft sees it when a message arrives.
  struct Self {
    uint64_t id = 0;
    bool pre_candidate = false;  // a candidate in its pre-vote phase
    uint64_t term = 0;           // current term (the round asks for term+1)
    // When the current round started (libraft's election_timer_start): a
    // new round forgets who answered the last one.
    uint64_t round_start_ms = 0;
    uint64_t last_log_index = 0;
    uint64_t last_log_term = 0;
  };
  // A RequestVote's arguments.
  struct Request {
    uint64_t from = 0;
    uint64_t term = 0;
    uint64_t last_log_index = 0;
    uint64_t last_log_term = 0;
    bool pre_vote = false;
    bool disrupt_leader = false;  // a leadership transfer's election
  };

  // Every pre-vote answer this replica receives (before libraft does).
  void OnPreVoteAnswer(const Self& self, uint64_t from);
  // Whether to set the request aside (true) rather than hand it to libraft.
  [[nodiscard]] bool SetAside(const Self& self, const Request& request);

 private:
  void EnterRound(const Self& self);

  uint64_t round_term_ = 0;
  uint64_t round_start_ms_ = 0;
  std::vector<uint64_t> answered_;  // who answered this round's requests
  // Replicas set aside in round_term_, with the start of the round that
  // did it.
  std::vector<std::pair<uint64_t, uint64_t>> held_;
};

}  // namespace dedup

#endif  // DEDUP_REPLICATION_RAFT_PREVOTE_TIEBREAK_H_
