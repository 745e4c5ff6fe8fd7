// SessionOp.timeout_ms: one alarm per stream, set for the earliest
// deadline of an operation still unanswered.
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/item_error.h"
#include "server/session_reactor.h"

namespace dedup {

void SessionReactor::WatchDeadlines(const std::shared_ptr<Frame>& frame) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    // Answered ones at the front go now: with like timeouts, the queue
    // stays about as long as what is in flight.
    ExpireLocked(std::chrono::steady_clock::time_point::min());
    for (int i = 0; i < frame->request.ops_size(); ++i) {
      const uint32_t timeout_ms = frame->request.ops(i).timeout_ms();
      if (timeout_ms == 0 || frame->answered[i].load()) continue;
      deadlines_.push(Deadline{
          frame->received + std::chrono::milliseconds(timeout_ms), frame, i});
    }
    if (deadlines_.empty()) return;
    if (!alarm_armed_) {
      ArmLocked(&actions);
    } else if (deadlines_.top().at < alarm_at_) {
      actions.cancel_alarm = alarm_;  // its callback arms for the earlier one
    }
  }
  Run(actions);
}

void SessionReactor::ArmLocked(Actions* actions) {
  if (deadlines_.empty() || alarm_armed_ || finished_) return;
  // A fresh alarm each time: the previous one may be running its callback.
  alarm_ = std::make_shared<grpc::Alarm>();
  alarm_armed_ = true;
  alarm_at_ = deadlines_.top().at;
  actions->arm = alarm_;
  actions->arm_at = alarm_at_;
}

void SessionReactor::ExpireLocked(std::chrono::steady_clock::time_point now) {
  while (!deadlines_.empty()) {
    const Deadline& top = deadlines_.top();
    const std::shared_ptr<Frame> frame = top.frame.lock();
    if (frame != nullptr && top.at > now &&
        !frame->answered[top.index].load()) {
      break;  // the earliest one still to come
    }
    if (frame != nullptr && !frame->answered[top.index].exchange(true)) {
      const v1::SessionOp& op = frame->request.ops(top.index);
      v1::SessionAnswer answer;
      answer.set_id(op.id());
      FillItemError(absl::DeadlineExceededError(absl::StrCat(
                        "timeout_ms: no answer within ", op.timeout_ms(),
                        " ms; if it was a write, its outcome is unknown")),
                    answer.mutable_error());
      in_flight_.erase(op.id());
      QueueLocked(KindOf(op), std::move(answer));
    }
    deadlines_.pop();
  }
}

void SessionReactor::OnAlarm() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    alarm_armed_ = false;
    ExpireLocked(std::chrono::steady_clock::now());
    ArmLocked(&actions);
    MaybeWriteLocked(&actions);
    MaybeFinishLocked(&actions);
  }
  Run(actions);
}

}  // namespace dedup
