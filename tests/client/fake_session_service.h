// An in-process fake of Dedup.Session for client unit tests: announces
// max_in_flight (once the test opens the gate), records each frame it
// receives, holds the operations until the test answers them (or answers
// each frame at once), can break the stream, or play a server without
// Session. Answers Begins only: STARTED with the number in the key ("k17")
// as fence, or the ItemError the test set. Also serves BeginBatch the same
// way, counting its items. Thread-safe.
#ifndef DEDUP_TESTS_CLIENT_FAKE_SESSION_SERVICE_H_
#define DEDUP_TESTS_CLIENT_FAKE_SESSION_SERVICE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dedup {

class FakeSessionService final : public v1::Dedup::Service {
 public:
  // How the fake treats a stream.
  enum class Mode { kSession, kUnimplemented, kUnparsed };

  explicit FakeSessionService(uint32_t max_in_flight,
                              Mode mode = Mode::kSession)
      : max_in_flight_(max_in_flight), mode_(mode) {}

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>* stream)
      override {
    {
      absl::MutexLock lock(&mu_);
      ++streams_;
      if (mode_ == Mode::kUnimplemented) {
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
      }
      if (mode_ == Mode::kUnparsed) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "request: cannot be parsed as the request of "
                            "/dedup.v1.Dedup/Session");
      }
      mu_.Await(absl::Condition(
          +[](FakeSessionService* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->open_; },
          this));
      stream_ = stream;
      v1::SessionResponse first;
      first.set_max_in_flight(max_in_flight_);
      stream->Write(first);
    }
    v1::SessionRequest frame;
    while (stream->Read(&frame)) {
      absl::MutexLock lock(&mu_);
      frames_.push_back(frame.ops_size());
      for (const v1::SessionOp& op : frame.ops()) held_.push_back(op);
      if (break_next_) {
        break_next_ = false;
        held_.clear();
        if (stream_ == stream) stream_ = nullptr;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake: broken");
      }
      if (auto_answer_) AnswerHeldLocked();
    }
    absl::MutexLock lock(&mu_);
    // A stream the client cancelled may end after its successor began:
    // only its own place is cleared.
    if (stream_ == stream) stream_ = nullptr;
    return grpc::Status::OK;
  }

  grpc::Status BeginBatch(grpc::ServerContext*,
                          const v1::BeginBatchRequest* request,
                          v1::BeginBatchResponse* response) override {
    absl::MutexLock lock(&mu_);
    batch_items_ += request->items_size();
    for (const v1::BeginRequest& item : request->items()) {
      *response->add_items()->mutable_response() = StartedFor(item);
    }
    return grpc::Status::OK;
  }

  // Lets the handler announce max_in_flight (closed: streams wait).
  void SetGate(bool open) {
    absl::MutexLock lock(&mu_);
    open_ = open;
  }
  void SetAutoAnswer(bool on) {
    absl::MutexLock lock(&mu_);
    auto_answer_ = on;
  }
  // The stream ends UNAVAILABLE right after its next frame, unanswered.
  void BreakOnNextFrame() {
    absl::MutexLock lock(&mu_);
    break_next_ = true;
  }
  // Every Begin is answered with this error instead.
  void SetError(v1::ItemError error) {
    absl::MutexLock lock(&mu_);
    error_ = std::move(error);
  }
  // The next `n` Begins are refused for the result budget (RESULT_BUDGET).
  void RefuseForBudget(int n) {
    absl::MutexLock lock(&mu_);
    budget_refusals_ = n;
  }
  // Answers every held operation, last received first, in one frame.
  void AnswerHeld() {
    absl::MutexLock lock(&mu_);
    AnswerHeldLocked();
  }
  // Waits until `n` operations were received in all.
  bool AwaitOps(int n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      int total = 0;
      for (int f : frames_) total += f;
      return total >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  std::vector<int> frames() const {
    absl::MutexLock lock(&mu_);
    return frames_;
  }
  int streams() const {
    absl::MutexLock lock(&mu_);
    return streams_;
  }
  int batch_items() const {
    absl::MutexLock lock(&mu_);
    return batch_items_;
  }

 private:
  static v1::BeginResponse StartedFor(const v1::BeginRequest& begin) {
    uint64_t n = 0;
    (void)absl::SimpleAtoi(begin.key().substr(1), &n);
    v1::BeginResponse response;
    response.set_status(v1::BeginResponse::STARTED);
    response.set_fence(n);
    return response;
  }

  void AnswerHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stream_ == nullptr || held_.empty()) return;
    v1::SessionResponse frame;
    for (auto it = held_.rbegin(); it != held_.rend(); ++it) {
      v1::SessionAnswer* answer = frame.add_answers();
      answer->set_id(it->id());
      if (budget_refusals_ > 0) {
        --budget_refusals_;
        v1::ItemError* e = answer->mutable_error();
        e->set_code(static_cast<int>(grpc::StatusCode::UNAVAILABLE));
        e->set_message("results: over the budget");
        e->set_reason("RESULT_BUDGET");
      } else if (error_.has_value()) {
        *answer->mutable_error() = *error_;
      } else {
        *answer->mutable_begin() = StartedFor(it->begin());
      }
    }
    held_.clear();
    stream_->Write(frame);
  }

  const uint32_t max_in_flight_;
  const Mode mode_;
  mutable absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  bool auto_answer_ ABSL_GUARDED_BY(mu_) = false;
  bool break_next_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::ItemError> error_ ABSL_GUARDED_BY(mu_);
  grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>* stream_
      ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<int> frames_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SessionOp> held_ ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  int batch_items_ ABSL_GUARDED_BY(mu_) = 0;
  int budget_refusals_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dedup

#endif  // DEDUP_TESTS_CLIENT_FAKE_SESSION_SERVICE_H_
