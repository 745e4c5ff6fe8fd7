#include "replication/raft_prevote_tiebreak.h"

#include <algorithm>

namespace dedup {

void PreVoteTieBreak::EnterRound(const Self& self) {
  if (self.term == round_term_ && self.round_start_ms == round_start_ms_) {
    return;
  }
  if (self.term != round_term_) held_.clear();
  round_term_ = self.term;
  round_start_ms_ = self.round_start_ms;
  answered_.clear();
}

void PreVoteTieBreak::OnPreVoteAnswer(const Self& self, uint64_t from) {
  if (!self.pre_candidate) return;
  EnterRound(self);
  if (std::find(answered_.begin(), answered_.end(), from) == answered_.end()) {
    answered_.push_back(from);
  }
}

bool PreVoteTieBreak::SetAside(const Self& self, const Request& request) {
  if (!self.pre_candidate || !request.pre_vote || request.disrupt_leader ||
      request.from <= self.id || request.term != self.term + 1) {
    return false;
  }
  // Its log is longer: it would refuse this replica's request, so only it
  // can win.
  if (request.last_log_term > self.last_log_term ||
      (request.last_log_term == self.last_log_term &&
       request.last_log_index > self.last_log_index)) {
    return false;
  }
  EnterRound(self);
  if (std::find(answered_.begin(), answered_.end(), request.from) !=
      answered_.end()) {
    return false;
  }
  for (const auto& [replica, round_start] : held_) {
    if (replica == request.from) return round_start == round_start_ms_;
  }
  held_.emplace_back(request.from, round_start_ms_);
  return true;
}

}  // namespace dedup
