#include "server/session_reactor.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/dedup_service.h"
#include "server/item_error.h"
#include "server/proto_convert.h"

namespace dedup {
namespace {

// Operations in flight a stream may have, per --max_batch_items allowed in
// one frame: enough frames to keep the store busy while answers travel.
constexpr uint32_t kFramesInFlight = 4;

std::chrono::system_clock::time_point ToSystem(
    std::chrono::steady_clock::time_point at) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             at - std::chrono::steady_clock::now());
}

}  // namespace

SessionOpKind KindOf(const v1::SessionOp& op) {
  switch (op.op_case()) {
    case v1::SessionOp::kBegin:
      return SessionOpKind::kBegin;
    case v1::SessionOp::kComplete:
      return SessionOpKind::kComplete;
    case v1::SessionOp::kRelease:
      return SessionOpKind::kRelease;
    case v1::SessionOp::kRenew:
      return SessionOpKind::kRenew;
    case v1::SessionOp::kCheckpoint:
      return SessionOpKind::kCheckpoint;
    case v1::SessionOp::kGet:
      return SessionOpKind::kGet;
    default:
      return SessionOpKind::kUnset;
  }
}

SessionReactor::SessionReactor(const DedupService* service,
                               grpc::CallbackServerContext* context)
    : service_(service),
      context_(context),
      metrics_(service->metrics_->session()),
      max_in_flight_(kFramesInFlight * service->limits_.max_batch_items) {
  service_->metrics_->CallStarted();
  metrics_->StreamOpened();
  absl::StatusOr<Caller> caller =
      service_->auth_->Authorize(*context, TenantRole::kClient, "Session");
  absl::Status refusal = caller.status();
  if (refusal.ok()) refusal = service_->lame_duck_.Check();
  if (!refusal.ok()) {
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
    }
    Finish(ToGrpcStatus(refusal));
    return;
  }
  caller_ = *std::move(caller);
  {
    absl::MutexLock lock(&mu_);
    writing_ = true;
  }
  out_.set_max_in_flight(max_in_flight_);
  metrics_->RecordFrameOut();
  StartWrite(&out_);
  StartRead(&in_);
  service_->AddSession(this);
}

void SessionReactor::OnDone() {
  service_->RemoveSession(this);
  metrics_->StreamClosed();
  service_->metrics_->CallFinished();
  delete this;
}

void SessionReactor::Run(const Actions& actions) {
  if (actions.write) StartWrite(&out_);
  if (actions.read) StartRead(&in_);
  if (actions.cancel_alarm != nullptr) actions.cancel_alarm->Cancel();
  if (actions.arm != nullptr) {
    actions.arm->Set(ToSystem(actions.arm_at), [this](bool) { OnAlarm(); });
  }
  if (actions.finish.has_value()) Finish(*actions.finish);
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {  // half-closed by the client, or the stream is gone
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      reading_done_ = true;
      MaybeFinishLocked(&actions);
    }
    return Run(actions);
  }
  metrics_->RecordFrameIn();
  auto frame = std::make_shared<Frame>();
  frame->request.Swap(&in_);
  frame->received = std::chrono::steady_clock::now();
  if (!Admit(*frame)) return;
  const int n = frame->request.ops_size();
  frame->answered = std::make_unique<std::atomic<bool>[]>(n);
  for (int i = 0; i < n; ++i) frame->answered[i].store(false);
  Submit(frame);
  WatchDeadlines(frame);
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    submitting_ = false;
    MaybeWriteLocked(&actions);
    if (reading_done_) {
      MaybeFinishLocked(&actions);
    } else {
      actions.read = true;
    }
  }
  Run(actions);
}

bool SessionReactor::Admit(const Frame& frame) {
  const int n = frame.request.ops_size();
  Actions actions;
  absl::Status refusal;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return false;  // a frame that crossed the stream's end
    const uint32_t max_ops = service_->limits_.max_batch_items;
    if (n == 0 || static_cast<uint32_t>(n) > max_ops) {
      refusal = absl::InvalidArgumentError(absl::StrCat(
          "ops: a frame holds 1..", max_ops, " operations, not ", n));
    } else if (in_flight_.size() + n > max_in_flight_) {
      refusal = absl::ResourceExhaustedError(absl::StrCat(
          "ops: ", in_flight_.size() + n, " operations in flight, over the ",
          max_in_flight_, " this stream announced (max_in_flight)"));
    } else {
      for (int i = 0; i < n && refusal.ok(); ++i) {
        const uint64_t id = frame.request.ops(i).id();
        if (in_flight_.insert(id).second) continue;
        for (int j = 0; j < i; ++j) in_flight_.erase(frame.request.ops(j).id());
        refusal = absl::InvalidArgumentError(absl::StrCat(
            "ops[", i, "].id: ", id, " is already in flight on this stream"));
      }
    }
    if (refusal.ok()) {
      store_pending_ += n;
      submitting_ = true;
      return true;
    }
    EndLocked(ToGrpcStatus(refusal), &actions);
  }
  Run(actions);
  return false;
}

void SessionReactor::Stop() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    EndLocked(ToGrpcStatus(service_->lame_duck_.Check()), &actions);
  }
  Run(actions);
}

void SessionReactor::EndLocked(grpc::Status status, Actions* actions) {
  if (end_.ok()) end_ = std::move(status);
  reading_done_ = true;
  MaybeFinishLocked(actions);
}

void SessionReactor::Refuse(const std::shared_ptr<Frame>& frame, int index,
                            const absl::Status& error) {
  v1::SessionAnswer answer;
  FillItemError(error, answer.mutable_error());
  Answer(frame, index, std::move(answer));
}

void SessionReactor::Answer(const std::shared_ptr<Frame>& frame, int index,
                            v1::SessionAnswer answer) {
  const v1::SessionOp& op = frame->request.ops(index);
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    --store_pending_;
    if (!frame->answered[index].exchange(true)) {
      answer.set_id(op.id());
      in_flight_.erase(op.id());
      QueueLocked(KindOf(op), std::move(answer));
      MaybeWriteLocked(&actions);
    }
    MaybeFinishLocked(&actions);
  }
  Run(actions);
}

void SessionReactor::QueueLocked(SessionOpKind kind, v1::SessionAnswer answer) {
  metrics_->RecordOp(kind, answer.has_error() ? answer.error().code() : 0);
  if (write_failed_) return;  // nobody to tell
  *queued_.add_answers() = std::move(answer);
}

void SessionReactor::MaybeWriteLocked(Actions* actions) {
  if (writing_ || submitting_ || write_failed_ || queued_.answers_size() == 0) {
    return;
  }
  out_.Clear();
  // Answers of several request frames may be ready together, each frame's
  // DUPLICATE results within --max_batch_response_bytes: one answer frame
  // takes at most that many bytes (one answer at least), so it fits the
  // 4 MiB a gRPC client receives by default; the rest go in the next.
  const size_t cap = service_->limits_.max_batch_response_bytes;
  size_t bytes = 0;
  int take = 0;
  while (take < queued_.answers_size()) {
    const size_t size = queued_.answers(take).ByteSizeLong();
    if (take > 0 && bytes + size > cap) break;
    bytes += size;
    ++take;
  }
  if (take == queued_.answers_size()) {
    out_.Swap(&queued_);
  } else {
    std::vector<v1::SessionAnswer*> moved(take);
    queued_.mutable_answers()->ExtractSubrange(0, take, moved.data());
    for (v1::SessionAnswer* answer : moved) {
      out_.mutable_answers()->AddAllocated(answer);
    }
  }
  writing_ = true;
  metrics_->RecordFrameOut();
  actions->write = true;
}

void SessionReactor::OnWriteDone(bool ok) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      write_failed_ = true;
      queued_.Clear();
    }
    MaybeWriteLocked(&actions);
    MaybeFinishLocked(&actions);
  }
  Run(actions);
}

void SessionReactor::MaybeFinishLocked(Actions* actions) {
  if (finished_ || !reading_done_ || store_pending_ > 0 || writing_ ||
      submitting_ || queued_.answers_size() > 0) {
    return;
  }
  if (alarm_armed_) {  // its callback comes back here
    actions->cancel_alarm = alarm_;
    return;
  }
  finished_ = true;
  actions->finish = end_;
}

}  // namespace dedup
