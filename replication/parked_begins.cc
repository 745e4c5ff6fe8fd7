#include "replication/parked_begins.h"

#include <algorithm>
#include <utility>
#include <variant>

namespace dedup {

void ParkedBegins::Park(PendingOp p, BeginDecision last) {
  p.waited = true;
  Waiter waiter;
  waiter.next_check_ms =
      std::min(p.wait_deadline_ms, last.record.lease_until_ms);
  waiter.last = std::move(last);
  const std::string skey = *KeyOf(p.op);
  waiter.op = std::move(p);
  waiters_[skey].push_back(std::move(waiter));
  count_.fetch_add(1);
}

std::vector<PendingOp> ParkedBegins::TakeKey(const std::string& skey) {
  std::vector<PendingOp> out;
  auto it = waiters_.find(skey);
  if (it == waiters_.end()) return out;
  for (Waiter& w : it->second) out.push_back(std::move(w.op));
  waiters_.erase(it);
  count_.fetch_sub(out.size());
  return out;
}

std::vector<PendingOp> ParkedBegins::TakeDue(int64_t now_ms) {
  std::vector<PendingOp> out;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    std::vector<Waiter>& list = it->second;
    for (auto w = list.begin(); w != list.end();) {
      if (w->next_check_ms <= now_ms) {
        out.push_back(std::move(w->op));
        w = list.erase(w);
      } else {
        ++w;
      }
    }
    if (list.empty()) {
      waiters_.erase(it++);
    } else {
      ++it;
    }
  }
  count_.fetch_sub(out.size());
  return out;
}

void ParkedBegins::AnswerAll(int64_t now_ms) {
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& [skey, list] : waiters) {
    for (Waiter& w : list) {
      w.last.retry_after_ms = std::clamp<int64_t>(
          w.last.record.lease_until_ms - now_ms, 1, kMaxRetryAfterMs);
      count_.fetch_sub(1);
      std::move(std::get<StoreCallback<BeginResult>>(w.op.done))(
          BeginResult{std::move(w.last), true});
    }
  }
}

}  // namespace dedup
