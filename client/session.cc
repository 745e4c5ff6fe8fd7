#include "client/session.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

namespace {

// Every live Session, looked at by one thread four times a second. The
// thread starts with the first Session and is never joined: it only sleeps
// when none is registered.
class SessionWatchdog {
 public:
  static SessionWatchdog& Get() {
    static SessionWatchdog* const watchdog = new SessionWatchdog();
    return *watchdog;
  }

  void Add(Session* session) {
    absl::MutexLock lock(&mu_);
    sessions_.insert(session);
    if (!started_) {
      started_ = true;
      std::thread([this] { Run(); }).detach();
    }
  }
  // Once it returns, no look at `session` is running or will start.
  void Remove(Session* session) {
    absl::MutexLock lock(&mu_);
    sessions_.erase(session);
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    for (;;) {
      tick_.WaitWithTimeout(&mu_, absl::Milliseconds(250));
      const absl::Time now = absl::Now();
      // Under mu_, so Remove waits for a look in progress; a look takes
      // only the session's own lock and never blocks.
      for (Session* session : sessions_) session->CheckStalled(now);
    }
  }

  absl::Mutex mu_;
  absl::CondVar tick_;  // never signalled: a timed sleep that releases mu_
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<Session*> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

Session::Session(v1::Dedup::Stub& stub) : stub_(stub) {
  SessionWatchdog::Get().Add(this);
}

Session::~Session() {
  SessionWatchdog::Get().Remove(this);
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

void Session::CheckStalled(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (call_ == nullptr || stalled_) return;
  const absl::Time limit = now - kStallGrace;
  bool stalled = false;
  for (const auto& [id, sent] : in_flight_) {
    if (sent.deadline < limit) stalled = true;
  }
  for (const Queued& queued : queued_) {
    if (queued.deadline < limit) stalled = true;
  }
  if (!stalled) return;
  stalled_ = true;
  call_->Cancel();
}

void Session::Submit(v1::SessionOp op, Done done) {
  SessionCall* start = nullptr;
  SessionCall* write = nullptr;
  const absl::Time deadline =
      op.timeout_ms() == 0 ? absl::InfiniteFuture()
                           : absl::Now() + absl::Milliseconds(op.timeout_ms());
  {
    absl::MutexLock lock(&mu_);
    queued_.push_back(Queued{std::move(op), std::move(done), deadline});
    if (call_ == nullptr) {
      call_ = start = new SessionCall(*this);
      ++streams_opened_;
      max_in_flight_ = 0;
      writing_ = reads_ended_ = stalled_ = false;
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
    in_flight_.emplace(next.op.id(), Sent{std::move(next.done), next.deadline});
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
      ready.emplace_back(std::move(it->second.done), std::move(answer));
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
  absl::flat_hash_map<uint64_t, Sent> in_flight;
  std::deque<Queued> queued;
  bool stalled = false;
  {
    absl::MutexLock lock(&mu_);
    if (call_ == call) {
      call_ = nullptr;
      in_flight.swap(in_flight_);
      queued.swap(queued_);
      stalled = stalled_;
    }
  }
  absl::Status failed = status;
  if (stalled) {
    // Not CANCELLED: nothing says the server will not answer the next
    // stream, and the retry rule moves on after an UNAVAILABLE.
    failed = absl::UnavailableError(
        absl::StrCat("session: an operation went unanswered ",
                     absl::FormatDuration(kStallGrace),
                     " past its deadline; the stream was reset"));
  } else if (status.ok()) {
    failed = absl::UnavailableError("session: stream ended");
  }
  for (auto& [id, sent] : in_flight) sent.done(failed);
  for (Queued& q : queued) q.done(failed);
  std::lock_guard<std::mutex> live(live_mu_);
  if (--live_calls_ == 0) live_zero_.notify_all();
}

}  // namespace dedup
