#include "client/coalescing_lane.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/backoff.h"
#include "client/batch_answers.h"
#include "client/outcome_unknown.h"
#include "client/retry_decision.h"
#include "client/retry_delay.h"

namespace dedup {
namespace {

// A batch closes before its request passes this many bytes: under gRPC's
// default 4 MiB message limit and dedupd's (at least 4 MiB), so several
// large Complete results cannot make one request that no server accepts.
constexpr size_t kMaxBatchBytes = size_t{3} << 20;

// How often a stream call refused for the result budget goes again at once
// (see SortOutResends): enough for a thousand callers of one large result.
constexpr int kFreeStreamResends = 64;

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

void OutstandingCalls::Add(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_ += n;
}

void OutstandingCalls::Sub(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_ -= n;
  if (calls_ == 0) zero_.notify_all();
}

void OutstandingCalls::WaitZero() {
  std::unique_lock<std::mutex> lock(mu_);
  zero_.wait(lock, [this] { return calls_ == 0; });
}

template <typename Traits>
CoalescingLane<Traits>::CoalescingLane(ShardRouter& shards,
                                       SessionPool& sessions,
                                       const CoalescingOptions& options,
                                       OutstandingCalls& outstanding)
    : shards_(shards),
      sessions_(sessions),
      rpc_(options.rpc),
      max_items_(std::clamp(options.max_batch_items, 1, 1000)),
      max_in_flight_(std::max(options.max_batches_in_flight, 1)),
      outstanding_(outstanding) {}

template <typename Traits>
void CoalescingLane<Traits>::Submit(const Item& item,
                                    CoalescingClient::Done<Answer> done) {
  typename Traits::ItemProto proto;
  ToProto(item, &proto);
  const size_t bytes = proto.ByteSizeLong();
  const bool parseable = StringsAreValidUtf8(proto);
  const bool stream = parseable && sessions_.enabled();
  shards_.Start();
  const uint32_t group = shards_.RouteOf(proto.namespace_(), proto.key()).group;
  outstanding_.Add(1);
  std::unique_ptr<Batch> ready;
  {
    absl::MutexLock lock(&mu_);
    if (stream || unary_ || !parseable) {
      ready = std::make_unique<Batch>();
      ready->stream = stream;
      ready->unary = !stream;
      ready->uncounted = true;
      ready->group = group;
      AddItem(*ready, std::move(proto), bytes, std::move(done));
    } else {
      ready = EnqueueLocked(group, std::move(proto), bytes, std::move(done));
    }
  }
  if (ready != nullptr) Send(ready.release());
}

template <typename Traits>
auto CoalescingLane<Traits>::EnqueueLocked(uint32_t group,
                                           typename Traits::ItemProto proto,
                                           size_t bytes,
                                           CoalescingClient::Done<Answer> done)
    -> std::unique_ptr<Batch> {
  Queue& queue = queues_[group];
  auto& queued = queue.queued;
  if (queued.empty() || queued.back()->sealed ||
      queued.back()->request.items_size() >= max_items_ ||
      (queued.back()->bytes > 0 &&
       queued.back()->bytes + bytes > kMaxBatchBytes)) {
    queued.push_back(std::make_unique<Batch>());
    queued.back()->group = group;
  }
  AddItem(*queued.back(), std::move(proto), bytes, std::move(done));
  if (queue.in_flight < max_in_flight_) return TakeLocked(queue);
  return nullptr;
}

template <typename Traits>
void CoalescingLane<Traits>::SendAsBatch(Batch* batch) {
  std::unique_ptr<Batch> owned(batch);
  std::unique_ptr<Batch> ready;
  {
    absl::MutexLock lock(&mu_);
    if (batch->round > 0 || batch->was_unknown[0] || unary_) {
      // Already in its retries: keeps them, alone and outside the count.
      batch->stream = false;
      batch->unary = unary_;
      ready = std::move(owned);
    } else {
      ready = EnqueueLocked(batch->group,
                            std::move(*batch->request.mutable_items(0)),
                            batch->bytes, std::move(batch->dones[0]));
    }
  }
  if (ready != nullptr) Send(ready.release());
}

template <typename Traits>
void CoalescingLane<Traits>::AddItem(Batch& batch,
                                     typename Traits::ItemProto proto,
                                     size_t bytes,
                                     CoalescingClient::Done<Answer> done) {
  batch.request.mutable_items()->Add(std::move(proto));
  batch.bytes += bytes;
  batch.dones.push_back(std::move(done));
  batch.was_unknown.push_back(false);
}

template <typename Traits>
auto CoalescingLane<Traits>::TakeLocked(Queue& queue)
    -> std::unique_ptr<Batch> {
  std::unique_ptr<Batch> batch = std::move(queue.queued.front());
  queue.queued.pop_front();
  ++queue.in_flight;
  return batch;
}

template <typename Traits>
void CoalescingLane<Traits>::Send(Batch* batch, bool new_attempt) {
  if (new_attempt) {
    batch->deadline = absl::Now() + rpc_.deadline;
    batch->hops = 0;
    batch->redirect.reset();
  }
  if (batch->group == ShardRouter::kNoGroup &&
      batch->request.items_size() == 1) {
    // Queued before the shard map came: its one key's group may be known
    // now, and the seed route would send it wherever the last redirect of
    // any group left the seed router.
    const auto& item = batch->request.items(0);
    batch->group = shards_.RouteOf(item.namespace_(), item.key()).group;
  }
  batch->route = shards_.RouteOfGroup(batch->group);
  batch->endpoint = batch->redirect != nullptr ? batch->redirect
                                               : batch->route.router->Current();
  if (batch->stream && !sessions_.enabled()) batch->stream = false;
  if (batch->stream && batch->endpoint != nullptr) {
    SendOnStream(batch);
    return;
  }
  batch->context = std::make_unique<grpc::ClientContext>();
  batch->context->set_deadline(absl::ToChronoTime(batch->deadline));
  batch->response.Clear();
  if (batch->endpoint == nullptr) {
    OnDone(batch, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "no server address configured"));
    return;
  }
  if (batch->unary) {
    batch->unary_answer.Clear();
    Traits::StartUnary(*batch->endpoint->stub, batch->context.get(),
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
  Traits::Start(*batch->endpoint->stub, batch->context.get(), &batch->request,
                &batch->response,
                [this, batch](grpc::Status status) { OnDone(batch, status); });
}

template <typename Traits>
void CoalescingLane<Traits>::SendLater(Batch* batch, absl::Duration delay,
                                       bool new_attempt) {
  batch->backoffs.push_back(std::make_unique<grpc::Alarm>());
  batch->backoffs.back()->Set(
      absl::ToChronoTime(absl::Now() + delay),
      [this, batch, new_attempt](bool) { Send(batch, new_attempt); });
}

template <typename Traits>
void CoalescingLane<Traits>::OnDone(Batch* batch, const grpc::Status& status) {
  if (batch->endpoint != nullptr) {
    shards_.Observe(batch->route, *batch->endpoint, *batch->context, status);
  }
  Settle(batch, ReadAttemptReply(status, *batch->context));
}

template <typename Traits>
void CoalescingLane<Traits>::Settle(Batch* batch, const AttemptReply& reply) {
  const grpc::Status& status = reply.status;
  // A whole batch's unknown outcome is not retried as a batch: it is
  // settled item by item below, re-sending only the items safe to re-send.
  const RetryDecision decision = DecideRetry(
      reply,
      AttemptState{batch->endpoint == nullptr ? "" : batch->endpoint->address,
                   batch->attempt + 1, batch->hops},
      rpc_, /*retry_unknown=*/false, ThreadLocalUniform01);
  if (decision.action == RetryAction::kFollowLeader) {
    ++batch->hops;
    batch->route.router->FollowLeader(*batch->endpoint, decision.leader);
    batch->redirect = batch->route.router->EndpointFor(decision.leader);
    SendLater(batch, absl::ZeroDuration(), /*new_attempt=*/false);
    return;
  }
  if (decision.advance) batch->route.router->Advance(*batch->endpoint);
  if (decision.action == RetryAction::kRetry) {
    ++batch->attempt;
    SendLater(batch, decision.delay, /*new_attempt=*/true);
    return;
  }
  std::unique_ptr<Batch> owned(batch);
  if (SentAnotherWay(*batch, status)) return;
  ItemAnswers answers = AnswersOf(*batch, status, decision.outcome_unknown);
  Resends resends = SortOutResends(*batch, answers);
  // Answers go out before this batch's place is given up, so calls their
  // callbacks start gather into the next batch instead of leaving alone.
  const int answered = AnswerTheRest(*batch, answers, resends.resent);
  Continue(*batch, std::move(resends));
  owned.reset();
  // Last: the client may be destroyed after it.
  if (answered > 0) outstanding_.Sub(answered);
}

template <typename Traits>
bool CoalescingLane<Traits>::SentAnotherWay(Batch& batch,
                                            const grpc::Status& status) {
  if (batch.stream) return false;  // one item, and the stream is there
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
      !ServerRetryDelay(status).has_value() && batch.request.items_size() > 1) {
    // Too large for a message limit on one side (say, several DUPLICATEs
    // with large results in one answer): each item goes again alone, as
    // its unary call would have. Owners make a re-sent Begin re-enter.
    SendEachAlone(batch);
    return true;
  }
  if constexpr (Traits::kBatchMayBeMissing) {
    // A server older than the batch method answers UNIMPLEMENTED, or (every
    // dedupd with the unary method, see IsUnparsedRequestReply) "cannot be
    // parsed". Items that joined a batch are parseable (see Submit), so
    // either way the method is missing: each item goes again alone as a
    // unary call, which answers it as Client would, and so do later calls.
    if (!batch.unary &&
        (status.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
         IsUnparsedRequestReply(ToAbslStatus(status)))) {
      SendUnary(batch);
      return true;
    }
  }
  return false;
}

template <typename Traits>
typename CoalescingLane<Traits>::ItemAnswers CoalescingLane<Traits>::AnswersOf(
    Batch& batch, const grpc::Status& status, bool outcome_unknown) {
  const int items = batch.request.items_size();
  // A whole RPC whose outcome is unknown counts as each item's, so that
  // only the items safe to re-send go again.
  if (outcome_unknown) {
    return std::vector<absl::StatusOr<Answer>>(
        items, absl::AbortedError(status.error_message()));
  }
  absl::StatusOr<typename Traits::Response> response =
      status.ok()
          ? absl::StatusOr<typename Traits::Response>(std::move(batch.response))
          : ToAbslStatus(status);
  return FromBatchResponse<Answer>(Traits::kMethod, items, std::move(response));
}

// Items refused with UNAVAILABLE (nothing happened) or ABORTED (outcome
// unknown, where re-sending is safe) go again in a batch of their own,
// which takes over this batch's place in flight.
//
// Except the Begins refused because the answer already held the server's
// --max_batch_response_bytes of stored results: many callers of one key
// with a large result would otherwise go again all together round after
// round, a few answered each time, until their attempts ran out. They are
// not failures. They go again at once (no backoff, no round spent) in
// sealed batches of at most as many items as this answer held results,
// which is about what fits one answer (results of one key have one size);
// items a batch still cannot fit split again the same way. That always
// ends: such a re-send is free only when this answer held a result, so each
// sealed batch is smaller than the batch it came from. One that held none
// (a single result larger than the whole budget, e.g. stored under a larger
// --max_result_bytes) spends rounds like any UNAVAILABLE.
//
// A stream call (one item) is refused so when the other answers of its
// server's frame spent the budget: it goes again at once, in a later frame,
// without a round, up to kFreeStreamResends times (each frame answers the
// results that fit, so that is progress), then spends rounds as above.
template <typename Traits>
typename CoalescingLane<Traits>::Resends CoalescingLane<Traits>::SortOutResends(
    Batch& batch, const ItemAnswers& answers) {
  const int items = batch.request.items_size();
  Resends out;
  out.resent.assign(items, false);
  if (!answers.ok()) return out;
  int fitted = 0;
  for (int i = 0; i < items; ++i) {
    if ((*answers)[i].ok() && Traits::HoldsResult(*(*answers)[i])) ++fitted;
  }
  const bool may_resend = batch.round + 1 < std::max(rpc_.max_attempts, 1);
  for (int i = 0; i < items; ++i) {
    if ((*answers)[i].ok()) continue;
    const absl::Status& error = (*answers)[i].status();
    if (batch.stream && IsResultBudgetRefusal(error) &&
        batch.free_resends < kFreeStreamResends) {
      out.at_once = std::make_unique<Batch>();
      out.at_once->round = batch.round;
      out.at_once->stream = out.at_once->uncounted = true;
      out.at_once->group = batch.group;
      out.at_once->free_resends = batch.free_resends + 1;
      MoveItem(batch, i, *out.at_once);
      out.resent[i] = true;
      continue;
    }
    if (fitted > 0 && IsResultBudgetRefusal(error)) {
      if (out.refit.empty() ||
          out.refit.back()->request.items_size() >= fitted) {
        out.refit.push_back(std::make_unique<Batch>());
        out.refit.back()->round = batch.round;
        out.refit.back()->sealed = true;
        out.refit.back()->group = batch.group;
      }
      MoveItem(batch, i, *out.refit.back());
      out.resent[i] = true;
      continue;
    }
    if (absl::IsAborted(error)) batch.was_unknown[i] = true;
    if (!may_resend ||
        !ItemResendable(error, Traits::SafeToResend(batch.request.items(i)))) {
      continue;
    }
    if (out.again == nullptr) {
      out.again = std::make_unique<Batch>();
      out.again->round = batch.round + 1;
      out.again->unary = batch.unary;
      out.again->stream = batch.stream;
      out.again->uncounted = batch.uncounted;
      out.again->group = batch.group;
    }
    MoveItem(batch, i, *out.again);
    out.resent[i] = true;
  }
  return out;
}

template <typename Traits>
int CoalescingLane<Traits>::AnswerTheRest(Batch& batch, ItemAnswers& answers,
                                          const std::vector<bool>& resent) {
  int answered = 0;
  for (int i = 0; i < batch.request.items_size(); ++i) {
    if (resent[i]) continue;
    ++answered;
    absl::StatusOr<Answer> answer =
        answers.ok() ? AsUnaryAnswer(i, std::move((*answers)[i]))
                     : absl::StatusOr<Answer>(answers.status());
    if (!answer.ok()) {
      answer = SettledItemError(Traits::kUnary, batch.was_unknown[i],
                                answer.status());
    }
    batch.dones[i](std::move(answer));
  }
  return answered;
}

// The re-fitted batches go first in the queue (their callers waited
// longest); `again` keeps this batch's place, else it is given up (a unary
// call has none).
template <typename Traits>
void CoalescingLane<Traits>::Continue(const Batch& batch, Resends resends) {
  std::vector<std::unique_ptr<Batch>> ready;
  {
    absl::MutexLock lock(&mu_);
    Queue& queue = queues_[batch.group];
    for (auto it = resends.refit.rbegin(); it != resends.refit.rend(); ++it) {
      queue.queued.push_front(std::move(*it));
    }
    if (resends.again == nullptr && !batch.uncounted) --queue.in_flight;
    while (queue.in_flight < max_in_flight_ && !queue.queued.empty()) {
      ready.push_back(TakeLocked(queue));
    }
  }
  if (resends.again != nullptr) {
    Batch* retry = resends.again.release();
    SendLater(
        retry,
        FullJitterBackoff(rpc_.backoff, retry->round - 1, ThreadLocalUniform01),
        /*new_attempt=*/true);
  }
  if (resends.at_once != nullptr) Send(resends.at_once.release());
  for (std::unique_ptr<Batch>& next : ready) Send(next.release());
}

template <typename Traits>
void CoalescingLane<Traits>::MoveItem(Batch& from, int i, Batch& to) {
  to.bytes += from.request.items(i).ByteSizeLong();
  to.request.mutable_items()->Add(std::move(*from.request.mutable_items(i)));
  to.dones.push_back(std::move(from.dones[i]));
  to.was_unknown.push_back(from.was_unknown[i]);
}

template <typename Traits>
void CoalescingLane<Traits>::Split(
    Batch& batch, bool unary, std::vector<std::unique_ptr<Batch>>& singles) {
  for (int i = 0; i < batch.request.items_size(); ++i) {
    auto single = std::make_unique<Batch>();
    single->round = batch.round;
    single->unary = unary;
    single->uncounted = unary;
    single->group = batch.group;
    MoveItem(batch, i, *single);
    singles.push_back(std::move(single));
  }
}

template <typename Traits>
void CoalescingLane<Traits>::SendEachAlone(Batch& batch) {
  const int items = batch.request.items_size();
  std::vector<std::unique_ptr<Batch>> singles;
  Split(batch, /*unary=*/false, singles);
  {
    absl::MutexLock lock(&mu_);
    queues_[batch.group].in_flight += items - 1;
  }
  for (auto& single : singles) Send(single.release());
}

template <typename Traits>
void CoalescingLane<Traits>::SendUnary(Batch& batch) {
  std::vector<std::unique_ptr<Batch>> singles;
  Split(batch, /*unary=*/true, singles);
  {
    absl::MutexLock lock(&mu_);
    unary_ = true;
    for (auto& [group, queue] : queues_) {
      for (std::unique_ptr<Batch>& queued : queue.queued) {
        Split(*queued, /*unary=*/true, singles);
      }
      queue.queued.clear();
    }
    if (!batch.uncounted) --queues_[batch.group].in_flight;
  }
  for (auto& single : singles) Send(single.release());
}

template class CoalescingLane<BeginLaneTraits>;
template class CoalescingLane<CompleteLaneTraits>;
template class CoalescingLane<CheckpointLaneTraits>;

}  // namespace dedup
