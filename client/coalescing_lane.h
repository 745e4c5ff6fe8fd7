// The machinery behind CoalescingClient (client/coalescing_client.h says
// what its callers get): one CoalescingLane per kind of call gathers the
// calls into batch RPCs, sends them with Client's leader following and
// retries, and settles each item into its caller's answer. The traits below
// name each kind's messages and RPCs; they are the only instantiations
// (coalescing_lane.cc).
#ifndef DEDUP_CLIENT_COALESCING_LANE_H_
#define DEDUP_CLIENT_COALESCING_LANE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "client/leader_router.h"
#include "client/retry_decision.h"
#include "client/session_pool.h"
#include "client/shard_router.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "grpcpp/client_context.h"

namespace dedup {

// Calls not yet answered, across the lanes of one client: its destructor
// waits for zero. A std::mutex, not absl::Mutex, because the waiter destroys
// it right after the last Sub unlocks, which POSIX mutexes allow.
class OutstandingCalls {
 public:
  void Add(int n);
  // Touches nothing after unlocking, so the waiter may destroy the object
  // as soon as the Sub that reaches zero unlocks.
  void Sub(int n);
  void WaitZero();

 private:
  std::mutex mu_;
  std::condition_variable zero_;
  int calls_ = 0;  // guarded by mu_
};

// What a lane of Begins sends.
struct BeginLaneTraits {
  using Item = BeginBatchItem;
  using ItemProto = v1::BeginRequest;
  using Answer = v1::BeginResponse;
  using Request = v1::BeginBatchRequest;
  using Response = v1::BeginBatchResponse;
  static constexpr const char* kMethod = "BeginBatch";
  static constexpr const char* kUnary = "Begin";
  // The item as a Session operation, and the answer of that kind.
  static ItemProto* MutableOp(v1::SessionOp& op) { return op.mutable_begin(); }
  static bool TakeAnswer(v1::SessionAnswer& answer, Answer* out) {
    if (!answer.has_begin()) return false;
    out->Swap(answer.mutable_begin());
    return true;
  }
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
  static void StartUnary(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                         const ItemProto* item, Answer* answer,
                         std::function<void(grpc::Status)> on_done) {
    stub.async()->Begin(context, item, answer, std::move(on_done));
  }
  // BeginBatch is as old as Begin.
  static constexpr bool kBatchMayBeMissing = false;
};

// What a lane of Completes sends.
struct CompleteLaneTraits {
  using Item = CompleteBatchItem;
  using ItemProto = v1::CompleteRequest;
  using Answer = v1::CompleteResponse;
  using Request = v1::CompleteBatchRequest;
  using Response = v1::CompleteBatchResponse;
  static constexpr const char* kMethod = "CompleteBatch";
  static constexpr const char* kUnary = "Complete";
  // The item as a Session operation, and the answer of that kind.
  static ItemProto* MutableOp(v1::SessionOp& op) {
    return op.mutable_complete();
  }
  static bool TakeAnswer(v1::SessionAnswer& answer, Answer* out) {
    if (!answer.has_complete()) return false;
    out->Swap(answer.mutable_complete());
    return true;
  }
  // Complete is idempotent for the same fence, outcome and result.
  static bool SafeToResend(const ItemProto&) { return true; }
  static bool HoldsResult(const Answer&) { return false; }
  static void Start(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                    const Request* request, Response* response,
                    std::function<void(grpc::Status)> on_done) {
    stub.async()->CompleteBatch(context, request, response, std::move(on_done));
  }
  static void StartUnary(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                         const ItemProto* item, Answer* answer,
                         std::function<void(grpc::Status)> on_done) {
    stub.async()->Complete(context, item, answer, std::move(on_done));
  }
  // CompleteBatch is as old as Complete.
  static constexpr bool kBatchMayBeMissing = false;
};

// What a lane of Checkpoints sends.
struct CheckpointLaneTraits {
  using Item = CheckpointBatchItem;
  using ItemProto = v1::CheckpointRequest;
  using Answer = v1::CheckpointResponse;
  using Request = v1::CheckpointBatchRequest;
  using Response = v1::CheckpointBatchResponse;
  static constexpr const char* kMethod = "CheckpointBatch";
  static constexpr const char* kUnary = "Checkpoint";
  // The item as a Session operation, and the answer of that kind.
  static ItemProto* MutableOp(v1::SessionOp& op) {
    return op.mutable_checkpoint();
  }
  static bool TakeAnswer(v1::SessionAnswer& answer, Answer* out) {
    if (!answer.has_checkpoint()) return false;
    out->Swap(answer.mutable_checkpoint());
    return true;
  }
  // The same fence, step and data again change nothing but the time.
  static bool SafeToResend(const ItemProto&) { return true; }
  static bool HoldsResult(const Answer&) { return false; }
  static void Start(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                    const Request* request, Response* response,
                    std::function<void(grpc::Status)> on_done) {
    stub.async()->CheckpointBatch(context, request, response,
                                  std::move(on_done));
  }
  static void StartUnary(v1::Dedup::Stub& stub, grpc::ClientContext* context,
                         const ItemProto* item, Answer* answer,
                         std::function<void(grpc::Status)> on_done) {
    stub.async()->Checkpoint(context, item, answer, std::move(on_done));
  }
  // CheckpointBatch came after Checkpoint: a server that has only Checkpoint
  // gets the items one by one (see CoalescingLane::OnDone).
  static constexpr bool kBatchMayBeMissing = true;
};

// The calls of one kind: per group of the shard map (one queue for all
// calls while the client holds no map, see client/shard_router.h), a queue
// of batches being filled, and how many are on the wire; a batch holds the
// calls of one group and goes to that group's leader. Invariant: a group's
// queue is empty unless max_batches_in_flight of its batches are out, so a
// call never waits while a batch could leave. Batches close at
// max_batch_items (at most 1000) or 3 MiB of requests.
//
// A call the server could not parse (a string field that is not UTF-8)
// never joins a batch, whose whole request the server would refuse: it
// leaves at once as its own unary RPC, outside the count of batches in
// flight, and gets the answer Client's call would. A lane whose server lacks
// the batch method (Traits::kBatchMayBeMissing only) turns unary for good:
// every call then leaves so.
//
// While the servers have Session (SessionPool::enabled), a call is instead
// a batch of its own sent at once as one operation on the Session stream
// of its group's leader (outside the count of batches in flight: the
// stream's self-clocking gathers the calls into frames), and settled by the
// same rules: the operation's answer is the batch's, an ItemError naming
// the leader (or OUTCOME_UNKNOWN) counts as the batch RPC's UNAVAILABLE
// with "dedup-leader" (or ABORTED with "dedup-outcome: unknown"), and a
// stream that ended first as the RPC's transport failure. A stream answered
// UNIMPLEMENTED or "cannot be parsed" turns the pool off: the call, and all
// later ones, go as batch RPCs.
//
// Thread-safe. Answers go to each call's `done` on gRPC's threads (or on
// the caller's, when the router has no address), one batch's in item order.
template <typename Traits>
class CoalescingLane {
 public:
  using Item = typename Traits::Item;
  using Answer = typename Traits::Answer;

  // `shards`, `sessions` and `outstanding` outlive the lane. options.rpc as
  // resolved for the seed router's addresses (ResolveClientOptions).
  CoalescingLane(ShardRouter& shards, SessionPool& sessions,
                 const CoalescingOptions& options,
                 OutstandingCalls& outstanding);

  // Sends `item` now or queues it; `done` gets its answer, once. The call
  // counts in `outstanding` until then.
  void Submit(const Item& item, CoalescingClient::Done<Answer> done);

 private:
  struct Batch {
    typename Traits::Request request;  // re-sent as is by retries
    typename Traits::Response response;
    std::vector<CoalescingClient::Done<Answer>> dones;  // one per item
    size_t bytes = 0;  // of the items, serialized
    std::unique_ptr<grpc::ClientContext> context;
    // The group of its items' keys (ShardRouter::kNoGroup: no map), and the
    // route the current attempt took (looked up at each send: the map may
    // have moved on).
    uint32_t group = ShardRouter::kNoGroup;
    ShardRouter::Route route;
    // The node the current attempt went to, and that attempt's deadline,
    // which redirects to the leader keep.
    std::shared_ptr<const Endpoint> endpoint;
    // The leader a redirect named, where the rest of the attempt goes: the
    // route's router may have been moved meanwhile by calls of other groups
    // (on the seed route) or by a stale hint.
    std::shared_ptr<const Endpoint> redirect;
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
    // Sent as the unary RPC of its one item (the server could not parse it
    // in a batch, or lacks the batch method), outside the lane's count of
    // batches in flight; its answer is put in `response` as a batch's would
    // be.
    bool unary = false;
    Answer unary_answer;
    // Sent as a Session operation (one item only); false again once the
    // pool is off.
    bool stream = false;
    // Outside the lane's count of batches in flight (unary or stream).
    bool uncounted = false;
    // Stream calls: result-budget refusals re-sent without spending a round
    // (see SortOutResends).
    int free_resends = 0;
    // Per item: an earlier round's outcome was unknown, so its final error
    // must say so.
    std::vector<bool> was_unknown;
    // One per retry, kept until the batch ends: an alarm's callback may
    // still be returning when the RPC it started completes.
    std::vector<std::unique_ptr<grpc::Alarm>> backoffs;
  };

  // The batches of one group.
  struct Queue {
    std::deque<std::unique_ptr<Batch>> queued;
    int in_flight = 0;
  };

  static void AddItem(Batch& batch, typename Traits::ItemProto proto,
                      size_t bytes, CoalescingClient::Done<Answer> done);
  // Adds the call to its group's queue; returns the batch that may leave
  // now, if any.
  std::unique_ptr<Batch> EnqueueLocked(uint32_t group,
                                       typename Traits::ItemProto proto,
                                       size_t bytes,
                                       CoalescingClient::Done<Answer> done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stream `batch` went on found no Session: its call joins the batch
  // RPCs as if just made (or, already in its retries, goes on alone).
  void SendAsBatch(Batch* batch);
  std::unique_ptr<Batch> TakeLocked(Queue& queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Owns `batch` until its answers are delivered. A new attempt gets a
  // fresh deadline; a redirect to the leader keeps the attempt's.
  void Send(Batch* batch, bool new_attempt = true);
  // Sends `batch` again after `delay`, from an alarm: never from inside the
  // callback of the RPC whose context Send replaces.
  void SendLater(Batch* batch, absl::Duration delay, bool new_attempt);
  // Settles the items of `batch`, whose attempt ended with `status`: answers
  // them, or sends them again.
  void OnDone(Batch* batch, const grpc::Status& status);
  // OnDone without the trailers' lessons for the shard map: what it does
  // once it has read the attempt's reply.
  void Settle(Batch* batch, const AttemptReply& reply);
  // Sends the one item of `batch` on its endpoint's Session.
  void SendOnStream(Batch* batch);
  // The answer of that operation, or the status of its stream.
  void OnStreamAnswer(Batch* batch, absl::StatusOr<v1::SessionAnswer> answer);
  // OnDone's steps once the attempt is over.
  using ItemAnswers = absl::StatusOr<std::vector<absl::StatusOr<Answer>>>;
  struct Resends {
    std::unique_ptr<Batch> again;  // the next round, in this batch's place
    std::vector<std::unique_ptr<Batch>> refit;  // result-budget refusals
    // A stream call's result-budget refusal: sent again at once.
    std::unique_ptr<Batch> at_once;
    std::vector<bool> resent;  // per item of the batch: moved to one above
  };
  // True when the batch went again another way: item by item (too large)
  // or as unary calls (the batch method is missing).
  bool SentAnotherWay(Batch& batch, const grpc::Status& status);
  // One answer per item (or the whole RPC's error).
  ItemAnswers AnswersOf(Batch& batch, const grpc::Status& status,
                        bool outcome_unknown);
  // Moves the items that go again out of `batch`.
  Resends SortOutResends(Batch& batch, const ItemAnswers& answers);
  // Answers every item not resent; returns how many.
  int AnswerTheRest(Batch& batch, ItemAnswers& answers,
                    const std::vector<bool>& resent);
  // Queues and sends the resends and what waited for this batch's place.
  void Continue(const Batch& batch, Resends resends);
  // Moves item `i` of `from` (whose slot is then left empty) to the end of
  // `to`.
  static void MoveItem(Batch& from, int i, Batch& to);
  // Moves each item of `batch` to a batch of its own, keeping its round,
  // appended to `singles`.
  static void Split(Batch& batch, bool unary,
                    std::vector<std::unique_ptr<Batch>>& singles);
  // Sends every item of `batch` (whose place is taken over) as its own batch.
  void SendEachAlone(Batch& batch);
  // Sends every item of `batch` (whose place in flight is given up), of the
  // queued batches and of every later call as its own unary call.
  void SendUnary(Batch& batch);

  ShardRouter& shards_;
  SessionPool& sessions_;
  const ClientOptions rpc_;
  const int max_items_;
  const int max_in_flight_;
  OutstandingCalls& outstanding_;

  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, Queue> queues_ ABSL_GUARDED_BY(mu_);
  // The server lacks the batch method: calls go as unary RPCs.
  bool unary_ ABSL_GUARDED_BY(mu_) = false;
};

extern template class CoalescingLane<BeginLaneTraits>;
extern template class CoalescingLane<CompleteLaneTraits>;
extern template class CoalescingLane<CheckpointLaneTraits>;

}  // namespace dedup

#endif  // DEDUP_CLIENT_COALESCING_LANE_H_
