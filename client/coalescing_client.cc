#include "client/coalescing_client.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/backoff.h"
#include "client/batch_answers.h"
#include "grpcpp/alarm.h"
#include "grpcpp/client_context.h"

namespace dedup {

struct CoalescingClient::BeginTraits {
  using Item = BeginBatchItem;
  using ItemProto = v1::BeginRequest;
  using Answer = v1::BeginResponse;
  using Request = v1::BeginBatchRequest;
  using Response = v1::BeginBatchResponse;
  static constexpr const char* kMethod = "BeginBatch";
  static void Start(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                    const Request* request, Response* response,
                    std::function<void(grpc::Status)> on_done) {
    stub.async()->BeginBatch(context, request, response, std::move(on_done));
  }
};

struct CoalescingClient::CompleteTraits {
  using Item = CompleteBatchItem;
  using ItemProto = v1::CompleteRequest;
  using Answer = v1::CompleteResponse;
  using Request = v1::CompleteBatchRequest;
  using Response = v1::CompleteBatchResponse;
  static constexpr const char* kMethod = "CompleteBatch";
  static void Start(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                    const Request* request, Response* response,
                    std::function<void(grpc::Status)> on_done) {
    stub.async()->CompleteBatch(context, request, response, std::move(on_done));
  }
};

namespace {

// A batch closes before its request passes this many bytes: under gRPC's
// default 4 MiB message limit and dedupd's (at least 4 MiB), so several
// large Complete results cannot make one request that no server accepts.
constexpr size_t kMaxBatchBytes = size_t{3} << 20;

// The server names a refused batch item's field "items[i].<field>"; the
// caller of a coalesced call sent one request, so it gets the message a
// unary call would have: "<field>: ...".
template <typename Answer>
absl::StatusOr<Answer> AsUnaryAnswer(int index, absl::StatusOr<Answer> answer) {
  if (answer.ok()) return answer;
  const std::string prefix = absl::StrCat("items[", index, "].");
  absl::string_view message = answer.status().message();
  if (!absl::ConsumePrefix(&message, prefix)) return answer;
  return absl::Status(answer.status().code(), message);
}

}  // namespace

// Calls not yet answered, across both lanes: the destructor waits for zero.
// A std::mutex, not absl::Mutex, because the waiter destroys it right after
// the last Sub unlocks, which POSIX mutexes allow.
class CoalescingClient::Outstanding {
 public:
  void Add(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_ += n;
  }
  void Sub(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_ -= n;
    if (calls_ == 0) zero_.notify_all();
  }
  void WaitZero() {
    std::unique_lock<std::mutex> lock(mu_);
    zero_.wait(lock, [this] { return calls_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable zero_;
  int calls_ = 0;  // guarded by mu_
};

// The calls of one kind: a queue of batches being filled, and how many are
// on the wire. Invariant: the queue is empty unless max_batches_in_flight
// batches are out, so a call never waits while a batch could leave.
template <typename Traits>
class CoalescingClient::Lane {
 public:
  using Item = typename Traits::Item;
  using Answer = typename Traits::Answer;

  Lane(v1::Dedup::Stub& stub, const CoalescingOptions& options,
       Outstanding& outstanding)
      : stub_(stub),
        rpc_(options.rpc),
        max_items_(std::clamp(options.max_batch_items, 1, 1000)),
        max_in_flight_(std::max(options.max_batches_in_flight, 1)),
        outstanding_(outstanding) {}

  void Submit(const Item& item, Done<Answer> done) {
    typename Traits::ItemProto proto;
    ToProto(item, &proto);
    const size_t bytes = proto.ByteSizeLong();
    outstanding_.Add(1);
    std::unique_ptr<Batch> ready;
    {
      absl::MutexLock lock(&mu_);
      if (queued_.empty() ||
          queued_.back()->request.items_size() >= max_items_ ||
          (queued_.back()->bytes > 0 &&
           queued_.back()->bytes + bytes > kMaxBatchBytes)) {
        queued_.push_back(std::make_unique<Batch>());
      }
      Batch& batch = *queued_.back();
      batch.request.mutable_items()->Add(std::move(proto));
      batch.bytes += bytes;
      batch.dones.push_back(std::move(done));
      if (in_flight_ < max_in_flight_) ready = TakeLocked();
    }
    if (ready != nullptr) Send(ready.release());
  }

 private:
  struct Batch {
    typename Traits::Request request;  // re-sent as is by retries
    typename Traits::Response response;
    std::vector<Done<Answer>> dones;  // one per request item
    size_t bytes = 0;                 // of the items, serialized
    std::unique_ptr<grpc::ClientContext> context;
    int attempt = 0;
    // One per retry, kept until the batch ends: an alarm's callback may
    // still be returning when the RPC it started completes.
    std::vector<std::unique_ptr<grpc::Alarm>> backoffs;
  };

  std::unique_ptr<Batch> TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::unique_ptr<Batch> batch = std::move(queued_.front());
    queued_.pop_front();
    ++in_flight_;
    return batch;
  }

  // Owns `batch` until its answers are delivered.
  void Send(Batch* batch) {
    batch->context = std::make_unique<grpc::ClientContext>();
    batch->context->set_deadline(
        absl::ToChronoTime(absl::Now() + rpc_.deadline));
    batch->response.Clear();
    Traits::Start(
        stub_, batch->context.get(), &batch->request, &batch->response,
        [this, batch](grpc::Status status) { OnDone(batch, status); });
  }

  void OnDone(Batch* batch, const grpc::Status& status) {
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        ++batch->attempt < std::max(rpc_.max_attempts, 1)) {
      const absl::Duration delay = FullJitterBackoff(
          rpc_.backoff, batch->attempt - 1, ThreadLocalUniform01);
      batch->backoffs.push_back(std::make_unique<grpc::Alarm>());
      batch->backoffs.back()->Set(absl::ToChronoTime(absl::Now() + delay),
                                  [this, batch](bool) { Send(batch); });
      return;
    }
    std::unique_ptr<Batch> owned(batch);
    const int items = batch->request.items_size();
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
        items > 1) {
      // Too large for a message limit on one side (say, several DUPLICATEs
      // with large results in one answer): each item goes again alone, as
      // its unary call would have. Owners make a re-sent Begin re-enter.
      SendEachAlone(*batch);
      return;
    }
    absl::StatusOr<typename Traits::Response> response =
        status.ok() ? absl::StatusOr<typename Traits::Response>(
                          std::move(batch->response))
                    : ToAbslStatus(status);
    auto answers =
        FromBatchResponse<Answer>(Traits::kMethod, items, std::move(response));
    // Answers go out before this batch's place is given up, so calls their
    // callbacks start gather into the next batch instead of leaving alone.
    for (int i = 0; i < items; ++i) {
      if (!answers.ok()) {
        batch->dones[i](answers.status());
      } else {
        batch->dones[i](AsUnaryAnswer(i, std::move((*answers)[i])));
      }
    }
    std::unique_ptr<Batch> next;
    {
      absl::MutexLock lock(&mu_);
      --in_flight_;
      if (!queued_.empty()) next = TakeLocked();
    }
    if (next != nullptr) Send(next.release());
    owned.reset();
    outstanding_.Sub(items);  // last: the client may be destroyed after it
  }

  // Sends every item of `batch` (whose place is taken over) as its own batch.
  void SendEachAlone(Batch& batch) {
    const int items = batch.request.items_size();
    std::vector<std::unique_ptr<Batch>> singles;
    for (int i = 0; i < items; ++i) {
      auto single = std::make_unique<Batch>();
      single->request.mutable_items()->Add(
          std::move(*batch.request.mutable_items(i)));
      single->dones.push_back(std::move(batch.dones[i]));
      singles.push_back(std::move(single));
    }
    {
      absl::MutexLock lock(&mu_);
      in_flight_ += items - 1;
    }
    for (auto& single : singles) Send(single.release());
  }

  v1::Dedup::Stub& stub_;
  const ClientOptions rpc_;
  const int max_items_;
  const int max_in_flight_;
  Outstanding& outstanding_;

  absl::Mutex mu_;
  std::deque<std::unique_ptr<Batch>> queued_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

CoalescingClient::CoalescingClient(std::shared_ptr<grpc::Channel> channel,
                                   CoalescingOptions options)
    : stub_(v1::Dedup::NewStub(std::move(channel))),
      outstanding_(std::make_unique<Outstanding>()),
      begins_(
          std::make_unique<Lane<BeginTraits>>(*stub_, options, *outstanding_)),
      completes_(std::make_unique<Lane<CompleteTraits>>(*stub_, options,
                                                        *outstanding_)) {}

CoalescingClient::~CoalescingClient() { outstanding_->WaitZero(); }

void CoalescingClient::BeginAsync(const BeginBatchItem& item,
                                  Done<v1::BeginResponse> done) {
  begins_->Submit(item, std::move(done));
}

void CoalescingClient::CompleteAsync(const CompleteBatchItem& item,
                                     Done<v1::CompleteResponse> done) {
  completes_->Submit(item, std::move(done));
}

namespace {

// Runs an async call and blocks until its callback ran.
template <typename Answer, typename Start>
absl::StatusOr<Answer> AwaitAnswer(Start start) {
  absl::Notification answered;
  absl::StatusOr<Answer> answer;
  start([&](absl::StatusOr<Answer> a) {
    answer = std::move(a);
    answered.Notify();
  });
  answered.WaitForNotification();
  return answer;
}

}  // namespace

absl::StatusOr<v1::BeginResponse> CoalescingClient::Begin(
    const BeginBatchItem& item) {
  return AwaitAnswer<v1::BeginResponse>(
      [&](Done<v1::BeginResponse> done) { BeginAsync(item, std::move(done)); });
}

absl::StatusOr<v1::CompleteResponse> CoalescingClient::Complete(
    const CompleteBatchItem& item) {
  return AwaitAnswer<v1::CompleteResponse>(
      [&](Done<v1::CompleteResponse> done) {
        CompleteAsync(item, std::move(done));
      });
}

}  // namespace dedup
