#include "client/session.h"

#include <algorithm>
#include <utility>

#include "client/batch_answers.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace dedup {

// One stream of a Session. Keeps a hold until its reads ended and no write
// is out, so no StartWrite can follow OnDone; deletes itself in OnDone.
class SessionCall final
    : public grpc::ClientBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  explicit SessionCall(Session& session) : session_(session) {}

  void Start(v1::Dedup::Stub& stub) {
    stub.async()->Session(&context_, this);
    AddHold();
    StartRead(&in_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }
  // Written only by the session under its lock while no write is out.
  v1::SessionRequest& out() { return out_; }
  void Write() { StartWrite(&out_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (session_.OnReadsEnded()) RemoveHold();
      return;
    }
    Session::Ready ready = session_.TakeAnswers(in_);
    in_.Clear();
    StartRead(&in_);
    for (auto& [done, answer] : ready) done(std::move(answer));
  }
  void OnWriteDone(bool ok) override {
    if (session_.OnWriteDone(ok)) RemoveHold();
  }
  void OnDone(const grpc::Status& status) override {
    session_.OnCallDone(this, ToAbslStatus(status));
    delete this;
  }

 private:
  Session& session_;
  grpc::ClientContext context_;
  v1::SessionRequest out_;
  v1::SessionResponse in_;
};

Session::~Session() {
  {
    absl::MutexLock lock(&mu_);
    if (call_ != nullptr) call_->Cancel();
  }
  std::unique_lock<std::mutex> lock(live_mu_);
  live_zero_.wait(lock, [this] { return live_calls_ == 0; });
}

int Session::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return streams_opened_;
}

void Session::Submit(v1::SessionOp op, Done done) {
  SessionCall* start = nullptr;
  SessionCall* write = nullptr;
  {
    absl::MutexLock lock(&mu_);
    queued_.push_back(Queued{std::move(op), std::move(done)});
    if (call_ == nullptr) {
      call_ = start = new SessionCall(*this);
      ++streams_opened_;
      max_in_flight_ = 0;
      writing_ = reads_ended_ = false;
      std::lock_guard<std::mutex> live(live_mu_);
      ++live_calls_;
    } else {
      write = FillFrameLocked();
    }
  }
  // Nothing is written on a new call before its first frame arrives.
  if (start != nullptr) start->Start(stub_);
  if (write != nullptr) write->Write();
}

SessionCall* Session::FillFrameLocked() {
  if (call_ == nullptr || max_in_flight_ == 0 || writing_ || reads_ended_ ||
      queued_.empty()) {
    return nullptr;
  }
  const size_t room =
      max_in_flight_ - std::min<size_t>(max_in_flight_, in_flight_.size());
  const size_t n = std::min({room, queued_.size(), size_t{kMaxFrameOps}});
  if (n == 0) return nullptr;
  v1::SessionRequest& frame = call_->out();
  frame.Clear();
  for (size_t i = 0; i < n; ++i) {
    Queued& next = queued_.front();
    next.op.set_id(next_id_++);
    in_flight_.emplace(next.op.id(), std::move(next.done));
    *frame.add_ops() = std::move(next.op);
    queued_.pop_front();
  }
  writing_ = true;
  return call_;
}

Session::Ready Session::TakeAnswers(v1::SessionResponse& frame) {
  Ready ready;
  SessionCall* write = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (max_in_flight_ == 0 && frame.max_in_flight() > 0) {
      max_in_flight_ = frame.max_in_flight();
    }
    ready.reserve(frame.answers_size());
    for (v1::SessionAnswer& answer : *frame.mutable_answers()) {
      auto it = in_flight_.find(answer.id());
      if (it == in_flight_.end()) continue;  // not ours: ignored
      ready.emplace_back(std::move(it->second), std::move(answer));
      in_flight_.erase(it);
    }
    write = FillFrameLocked();
  }
  if (write != nullptr) write->Write();
  return ready;
}

bool Session::OnWriteDone(bool ok) {
  SessionCall* write = nullptr;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (reads_ended_) return true;
    // A failed write means the stream is broken: its reads end next.
    if (ok) write = FillFrameLocked();
  }
  if (write != nullptr) write->Write();
  return false;
}

bool Session::OnReadsEnded() {
  absl::MutexLock lock(&mu_);
  reads_ended_ = true;
  return !writing_;
}

void Session::OnCallDone(SessionCall* call, const absl::Status& status) {
  // Every operation not answered fails, queued ones included: the caller
  // retries them, and the next Submit opens a new stream.
  absl::flat_hash_map<uint64_t, Done> in_flight;
  std::deque<Queued> queued;
  {
    absl::MutexLock lock(&mu_);
    if (call_ == call) {
      call_ = nullptr;
      in_flight.swap(in_flight_);
      queued.swap(queued_);
    }
  }
  const absl::Status failed =
      status.ok() ? absl::UnavailableError("session: stream ended") : status;
  for (auto& [id, done] : in_flight) done(failed);
  for (Queued& q : queued) q.done(failed);
  std::lock_guard<std::mutex> live(live_mu_);
  if (--live_calls_ == 0) live_zero_.notify_all();
}

}  // namespace dedup
