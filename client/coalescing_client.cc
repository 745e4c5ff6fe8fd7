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
#include "client/outcome_unknown.h"
#include "client/retry_delay.h"
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
  static constexpr const char* kUnary = "Begin";
  // Only an owner makes a re-sent Begin re-enter its own claim.
  static bool SafeToResend(const ItemProto& item) {
    return !item.owner().empty();
  }
  // The answer spent some of the batch answer's result budget.
  static bool HoldsResult(const Answer& answer) {
    return !answer.result().empty();
  }
  static void Start(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                    const Request* request, Response* response,
                    std::function<void(grpc::Status)> on_done) {
    stub.async()->BeginBatch(context, request, response, std::move(on_done));
  }
  // BeginBatch is as old as Begin.
  static constexpr bool kUnaryFallback = false;
};

struct CoalescingClient::CompleteTraits {
  using Item = CompleteBatchItem;
  using ItemProto = v1::CompleteRequest;
  using Answer = v1::CompleteResponse;
  using Request = v1::CompleteBatchRequest;
  using Response = v1::CompleteBatchResponse;
  static constexpr const char* kMethod = "CompleteBatch";
  static constexpr const char* kUnary = "Complete";
  // Complete is idempotent for the same fence, outcome and result.
  static bool SafeToResend(const ItemProto&) { return true; }
  static bool HoldsResult(const Answer&) { return false; }
  static void Start(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                    const Request* request, Response* response,
                    std::function<void(grpc::Status)> on_done) {
    stub.async()->CompleteBatch(context, request, response, std::move(on_done));
  }
  // CompleteBatch is as old as Complete.
  static constexpr bool kUnaryFallback = false;
};

struct CoalescingClient::CheckpointTraits {
  using Item = CheckpointBatchItem;
  using ItemProto = v1::CheckpointRequest;
  using Answer = v1::CheckpointResponse;
  using Request = v1::CheckpointBatchRequest;
  using Response = v1::CheckpointBatchResponse;
  static constexpr const char* kMethod = "CheckpointBatch";
  static constexpr const char* kUnary = "Checkpoint";
  // The same fence, step and data again change nothing but the time.
  static bool SafeToResend(const ItemProto&) { return true; }
  static bool HoldsResult(const Answer&) { return false; }
  static void Start(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                    const Request* request, Response* response,
                    std::function<void(grpc::Status)> on_done) {
    stub.async()->CheckpointBatch(context, request, response,
                                  std::move(on_done));
  }
  // CheckpointBatch came after Checkpoint: a server that has only Checkpoint
  // gets the items one by one (see Lane::OnDone).
  static constexpr bool kUnaryFallback = true;
  static void StartUnary(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                         const ItemProto* item, Answer* answer,
                         std::function<void(grpc::Status)> on_done) {
    stub.async()->Checkpoint(context, item, answer, std::move(on_done));
  }
  // Whether the server can parse `request` (its strings are valid UTF-8), so
  // that refusing it as unparseable means the method is missing.
  static bool Parseable(const Request& request) {
    for (const ItemProto& item : request.items()) {
      if (!IsValidUtf8(item.namespace_()) || !IsValidUtf8(item.key()) ||
          !IsValidUtf8(item.step())) {
        return false;
      }
    }
    return true;
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
  absl::Status unary(answer.status().code(), message);
  answer.status().ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) {
        unary.SetPayload(url, payload);
      });
  return unary;
}

}  // namespace

// Calls not yet answered, across the lanes: the destructor waits for zero.
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
//
// A lane whose server lacks the batch method (Traits::kUnaryFallback only)
// turns unary for good: each call then leaves at once as its own unary RPC,
// outside the count of batches in flight, as Client's calls would.
template <typename Traits>
class CoalescingClient::Lane {
 public:
  using Item = typename Traits::Item;
  using Answer = typename Traits::Answer;

  Lane(LeaderRouter& router, const CoalescingOptions& options,
       Outstanding& outstanding)
      : router_(router),
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
      if (unary_) {
        ready = std::make_unique<Batch>();
        ready->unary = true;
        AddItem(*ready, std::move(proto), bytes, std::move(done));
      } else {
        if (queued_.empty() || queued_.back()->sealed ||
            queued_.back()->request.items_size() >= max_items_ ||
            (queued_.back()->bytes > 0 &&
             queued_.back()->bytes + bytes > kMaxBatchBytes)) {
          queued_.push_back(std::make_unique<Batch>());
        }
        AddItem(*queued_.back(), std::move(proto), bytes, std::move(done));
        if (in_flight_ < max_in_flight_) ready = TakeLocked();
      }
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
    // The node the current attempt went to, and that attempt's deadline,
    // which redirects to the leader keep.
    std::shared_ptr<const Endpoint> endpoint;
    absl::Time deadline;
    int attempt = 0;  // RPC attempts of this round.
    int hops = 0;     // Leader redirects in this attempt.
    // Rounds: a batch re-sending items an earlier batch could not settle is
    // round 1, and so on, up to max_attempts. Items re-sent because the
    // answer's result budget was spent keep their batch's round.
    int round = 0;
    // Holds such re-sent items only: calls joining it would make it larger
    // than the answer it is sized to fit.
    bool sealed = false;
    // Sent as the unary RPC of its one item (the server lacks the batch
    // method), outside the lane's count of batches in flight; its answer is
    // put in `response` as a batch's would be.
    bool unary = false;
    Answer unary_answer;
    // Per item: an earlier round's outcome was unknown, so its final error
    // must say so.
    std::vector<bool> was_unknown;
    // One per retry, kept until the batch ends: an alarm's callback may
    // still be returning when the RPC it started completes.
    std::vector<std::unique_ptr<grpc::Alarm>> backoffs;
  };

  static void AddItem(Batch& batch, typename Traits::ItemProto proto,
                      size_t bytes, Done<Answer> done) {
    batch.request.mutable_items()->Add(std::move(proto));
    batch.bytes += bytes;
    batch.dones.push_back(std::move(done));
    batch.was_unknown.push_back(false);
  }

  std::unique_ptr<Batch> TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::unique_ptr<Batch> batch = std::move(queued_.front());
    queued_.pop_front();
    ++in_flight_;
    return batch;
  }

  // Owns `batch` until its answers are delivered. A new attempt gets a
  // fresh deadline; a redirect to the leader keeps the attempt's.
  void Send(Batch* batch, bool new_attempt = true) {
    if (new_attempt) {
      batch->deadline = absl::Now() + rpc_.deadline;
      batch->hops = 0;
    }
    batch->context = std::make_unique<grpc::ClientContext>();
    batch->context->set_deadline(absl::ToChronoTime(batch->deadline));
    batch->response.Clear();
    batch->endpoint = router_.Current();
    if (batch->endpoint == nullptr) {
      OnDone(batch, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "no server address configured"));
      return;
    }
    if constexpr (Traits::kUnaryFallback) {
      if (batch->unary) {
        batch->unary_answer.Clear();
        Traits::StartUnary(
            *batch->endpoint->stub, batch->context.get(),
            &batch->request.items(0), &batch->unary_answer,
            [this, batch](grpc::Status status) {
              if (status.ok()) {
                *batch->response.add_items()->mutable_response() =
                    std::move(batch->unary_answer);
              }
              OnDone(batch, status);
            });
        return;
      }
    }
    Traits::Start(*batch->endpoint->stub, batch->context.get(), &batch->request,
                  &batch->response, [this, batch](grpc::Status status) {
                    OnDone(batch, status);
                  });
  }

  // Sends `batch` again after `delay`, from an alarm: never from inside the
  // callback of the RPC whose context Send replaces.
  void SendLater(Batch* batch, absl::Duration delay, bool new_attempt) {
    batch->backoffs.push_back(std::make_unique<grpc::Alarm>());
    batch->backoffs.back()->Set(
        absl::ToChronoTime(absl::Now() + delay),
        [this, batch, new_attempt](bool) { Send(batch, new_attempt); });
  }

  void OnDone(Batch* batch, const grpc::Status& status) {
    const int max_attempts = std::max(rpc_.max_attempts, 1);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      const std::string leader = LeaderHint(*batch->context);
      if (!leader.empty() && leader != batch->endpoint->address &&
          batch->hops < rpc_.max_leader_hops) {
        ++batch->hops;
        router_.FollowLeader(*batch->endpoint, leader);
        SendLater(batch, absl::ZeroDuration(), /*new_attempt=*/false);
        return;
      }
      router_.Advance(*batch->endpoint);
    }
    // Over a limit (a tenant's): the server says when to come back.
    if (std::optional<absl::Duration> delay = ServerRetryDelay(status);
        delay.has_value() && batch->attempt + 1 < max_attempts) {
      ++batch->attempt;
      SendLater(batch, *delay, /*new_attempt=*/true);
      return;
    }
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        ++batch->attempt < max_attempts) {
      SendLater(batch,
                FullJitterBackoff(rpc_.backoff, batch->attempt - 1,
                                  ThreadLocalUniform01),
                /*new_attempt=*/true);
      return;
    }
    std::unique_ptr<Batch> owned(batch);
    const int items = batch->request.items_size();
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
        !ServerRetryDelay(status).has_value() && items > 1) {
      // Too large for a message limit on one side (say, several DUPLICATEs
      // with large results in one answer): each item goes again alone, as
      // its unary call would have. Owners make a re-sent Begin re-enter.
      SendEachAlone(*batch);
      return;
    }
    if constexpr (Traits::kUnaryFallback) {
      // A server older than the batch method answers UNIMPLEMENTED, or (every
      // dedupd with the unary method, see IsUnparsedRequestReply) "cannot be
      // parsed", which dedupd also answers a request it cannot parse (a
      // string that is not UTF-8; dedupd builds older still said
      // UNIMPLEMENTED for that). Either way each item goes again alone as a
      // unary call, which answers it as Client would. Later calls go unary
      // too only when the request was parseable, so the method must be
      // missing: one caller's bad key must not end batching.
      if (!batch->unary &&
          (status.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
           IsUnparsedRequestReply(ToAbslStatus(status)))) {
        SendUnary(*batch, /*for_good=*/Traits::Parseable(batch->request));
        return;
      }
    }
    // One answer per item. A whole RPC whose outcome is unknown counts as
    // each item's, so that only the items safe to re-send go again.
    absl::StatusOr<std::vector<absl::StatusOr<Answer>>> answers;
    if (IsUnknownOutcomeReply(status, *batch->context)) {
      answers = std::vector<absl::StatusOr<Answer>>(
          items, absl::AbortedError(status.error_message()));
    } else {
      absl::StatusOr<typename Traits::Response> response =
          status.ok() ? absl::StatusOr<typename Traits::Response>(
                            std::move(batch->response))
                      : ToAbslStatus(status);
      answers = FromBatchResponse<Answer>(Traits::kMethod, items,
                                          std::move(response));
    }
    // Items refused with UNAVAILABLE (nothing happened) or ABORTED (outcome
    // unknown, where re-sending is safe) go again in a batch of their own,
    // which takes over this batch's place in flight.
    //
    // Except the Begins refused because the answer already held the
    // server's --max_batch_response_bytes of stored results: many callers of
    // one key with a large result would otherwise go again all together
    // round after round, a few answered each time, until their attempts ran
    // out. They are not failures. They go again at once (no backoff, no
    // round spent) in sealed batches of at most as many items as this answer
    // held results, which is about what fits one answer (results of one key
    // have one size); items a batch still cannot fit split again the same
    // way. That always ends: such a re-send is free only when this answer
    // held a result, so each sealed batch is smaller than the batch it came
    // from. One that held none (a single result larger than the whole
    // budget, e.g. stored under a larger --max_result_bytes) spends rounds
    // like any UNAVAILABLE.
    int fitted = 0;
    for (int i = 0; answers.ok() && i < items; ++i) {
      if ((*answers)[i].ok() && Traits::HoldsResult(*(*answers)[i])) ++fitted;
    }
    const bool may_resend = batch->round + 1 < max_attempts;
    std::unique_ptr<Batch> again;
    std::vector<std::unique_ptr<Batch>> refit;
    std::vector<bool> resent(items, false);
    for (int i = 0; answers.ok() && i < items; ++i) {
      if ((*answers)[i].ok()) continue;
      const absl::Status& error = (*answers)[i].status();
      if (fitted > 0 && IsResultBudgetRefusal(error)) {
        if (refit.empty() || refit.back()->request.items_size() >= fitted) {
          refit.push_back(std::make_unique<Batch>());
          refit.back()->round = batch->round;
          refit.back()->sealed = true;
        }
        MoveItem(*batch, i, *refit.back());
        resent[i] = true;
        continue;
      }
      const bool aborted = absl::IsAborted(error);
      if (aborted) batch->was_unknown[i] = true;
      if (!may_resend ||
          !(absl::IsUnavailable(error) ||
            (aborted && Traits::SafeToResend(batch->request.items(i))))) {
        continue;
      }
      if (again == nullptr) {
        again = std::make_unique<Batch>();
        again->round = batch->round + 1;
        again->unary = batch->unary;
      }
      MoveItem(*batch, i, *again);
      resent[i] = true;
    }
    // Answers go out before this batch's place is given up, so calls their
    // callbacks start gather into the next batch instead of leaving alone.
    int answered = 0;
    for (int i = 0; i < items; ++i) {
      if (resent[i]) continue;
      ++answered;
      absl::StatusOr<Answer> answer =
          answers.ok() ? AsUnaryAnswer(i, std::move((*answers)[i]))
                       : absl::StatusOr<Answer>(answers.status());
      if (!answer.ok()) {
        answer = SettledItemError(Traits::kUnary, batch->was_unknown[i],
                                  answer.status());
      }
      batch->dones[i](std::move(answer));
    }
    // The re-fitted batches go first in the queue (their callers waited
    // longest); `again` keeps this batch's place, else it is given up (a
    // unary call has none).
    std::vector<std::unique_ptr<Batch>> ready;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = refit.rbegin(); it != refit.rend(); ++it) {
        queued_.push_front(std::move(*it));
      }
      if (again == nullptr && !batch->unary) --in_flight_;
      while (in_flight_ < max_in_flight_ && !queued_.empty()) {
        ready.push_back(TakeLocked());
      }
    }
    if (again != nullptr) {
      Batch* retry = again.release();
      SendLater(retry,
                FullJitterBackoff(rpc_.backoff, retry->round - 1,
                                  ThreadLocalUniform01),
                /*new_attempt=*/true);
    }
    for (std::unique_ptr<Batch>& next : ready) Send(next.release());
    owned.reset();
    // Last: the client may be destroyed after it.
    if (answered > 0) outstanding_.Sub(answered);
  }

  // Moves item `i` of `from` (whose slot is then left empty) to the end of
  // `to`.
  static void MoveItem(Batch& from, int i, Batch& to) {
    to.bytes += from.request.items(i).ByteSizeLong();
    to.request.mutable_items()->Add(std::move(*from.request.mutable_items(i)));
    to.dones.push_back(std::move(from.dones[i]));
    to.was_unknown.push_back(from.was_unknown[i]);
  }

  // Moves each item of `batch` to a batch of its own, keeping its round,
  // appended to `singles`.
  static void Split(Batch& batch, bool unary,
                    std::vector<std::unique_ptr<Batch>>& singles) {
    for (int i = 0; i < batch.request.items_size(); ++i) {
      auto single = std::make_unique<Batch>();
      single->round = batch.round;
      single->unary = unary;
      MoveItem(batch, i, *single);
      singles.push_back(std::move(single));
    }
  }

  // Sends every item of `batch` (whose place is taken over) as its own batch.
  void SendEachAlone(Batch& batch) {
    const int items = batch.request.items_size();
    std::vector<std::unique_ptr<Batch>> singles;
    Split(batch, /*unary=*/false, singles);
    {
      absl::MutexLock lock(&mu_);
      in_flight_ += items - 1;
    }
    for (auto& single : singles) Send(single.release());
  }

  // Sends every item of `batch` (whose place in flight is given up) as its
  // own unary call; `for_good`: the queued calls and every later one too.
  void SendUnary(Batch& batch, bool for_good) {
    std::vector<std::unique_ptr<Batch>> singles;
    Split(batch, /*unary=*/true, singles);
    std::vector<std::unique_ptr<Batch>> ready;
    {
      absl::MutexLock lock(&mu_);
      if (for_good) {
        unary_ = true;
        for (std::unique_ptr<Batch>& queued : queued_) {
          Split(*queued, /*unary=*/true, singles);
        }
        queued_.clear();
      }
      --in_flight_;
      while (in_flight_ < max_in_flight_ && !queued_.empty()) {
        ready.push_back(TakeLocked());
      }
    }
    for (auto& single : singles) Send(single.release());
    for (auto& next : ready) Send(next.release());
  }

  LeaderRouter& router_;
  const ClientOptions rpc_;
  const int max_items_;
  const int max_in_flight_;
  Outstanding& outstanding_;

  absl::Mutex mu_;
  std::deque<std::unique_ptr<Batch>> queued_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // The server lacks the batch method: calls go as unary RPCs.
  bool unary_ ABSL_GUARDED_BY(mu_) = false;
};

CoalescingClient::CoalescingClient(std::shared_ptr<grpc::Channel> channel,
                                   CoalescingOptions options)
    : CoalescingClient(std::make_unique<LeaderRouter>(
                           std::move(channel), options.rpc.channel_factory),
                       options) {}

CoalescingClient::CoalescingClient(std::vector<std::string> targets,
                                   CoalescingOptions options)
    : CoalescingClient(std::make_unique<LeaderRouter>(
                           std::move(targets), options.rpc.channel_factory),
                       options) {}

namespace {

// max_attempts 0 resolved for the router's number of addresses, as Client
// does (a channel counts as one).
CoalescingOptions Resolved(CoalescingOptions options,
                           const LeaderRouter& router) {
  options.rpc = ResolveClientOptions(
      std::move(options.rpc), std::max<size_t>(router.addresses().size(), 1));
  return options;
}

}  // namespace

CoalescingClient::CoalescingClient(std::unique_ptr<LeaderRouter> router,
                                   const CoalescingOptions& options)
    : router_(std::move(router)),
      outstanding_(std::make_unique<Outstanding>()),
      begins_(std::make_unique<Lane<BeginTraits>>(
          *router_, Resolved(options, *router_), *outstanding_)),
      completes_(std::make_unique<Lane<CompleteTraits>>(
          *router_, Resolved(options, *router_), *outstanding_)),
      checkpoints_(std::make_unique<Lane<CheckpointTraits>>(
          *router_, Resolved(options, *router_), *outstanding_)) {}

CoalescingClient::~CoalescingClient() { outstanding_->WaitZero(); }

void CoalescingClient::BeginAsync(const BeginBatchItem& item,
                                  Done<v1::BeginResponse> done) {
  begins_->Submit(item, std::move(done));
}

void CoalescingClient::CompleteAsync(const CompleteBatchItem& item,
                                     Done<v1::CompleteResponse> done) {
  completes_->Submit(item, std::move(done));
}

void CoalescingClient::CheckpointAsync(const CheckpointBatchItem& item,
                                       Done<v1::CheckpointResponse> done) {
  checkpoints_->Submit(item, std::move(done));
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

absl::StatusOr<v1::CheckpointResponse> CoalescingClient::Checkpoint(
    const CheckpointBatchItem& item) {
  return AwaitAnswer<v1::CheckpointResponse>(
      [&](Done<v1::CheckpointResponse> done) {
        CheckpointAsync(item, std::move(done));
      });
}

}  // namespace dedup
