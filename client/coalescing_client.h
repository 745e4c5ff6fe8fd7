// Sends the concurrent Begins, Completes and Checkpoints of one process as
// BeginBatch, CompleteBatch and CheckpointBatch RPCs, so N callers cost the
// server a few calls instead of N.
//
// A call leaves at once while fewer than `max_batches_in_flight` batches of
// its kind are outstanding; otherwise it joins the next batch, which leaves
// the moment one returns. So a lone caller pays no added delay, and batches
// grow with the load: the server's per-RPC cost is what bounds unary
// throughput, and its durable writes already share fsyncs.
//
// Each call answers as Client::Begin / Complete / Checkpoint would: the
// server's answer, the refusal of its item (same code and message as a unary
// call's: "key: ...", without the batch's "items[i]." prefix), or the
// batch's RPC error. A batch is retried on UNAVAILABLE with the same owners,
// like Client::BeginBatch. Begins that must wait (wait_ms > 0) cannot be
// batched: use Client::Begin for those.
//
// The server cannot parse a string field (namespace, key, owner, step) that
// is not valid UTF-8, and refuses the whole request that holds one
// (INVALID_ARGUMENT "request: cannot be parsed as the request of
// .../BeginBatch"). So such a call never joins a batch: it goes as its own
// unary call (with the retries and leader following of a batch), and it
// alone is refused, exactly as Client's call is (".../Begin").
//
// Sharded clusters (client/shard_router.h): a call joins a batch of its
// key's group, sent to that group's leader; calls made before the first
// fetch of the shard map ended go the way they go without one (the blocking
// forms wait for it, as Client's calls do).
//
// Cluster mode is handled as by Client: batches follow the leader a follower
// names ("dedup-leader") at once, move to the next address on other
// UNAVAILABLEs, and remember the leader. Items are settled one by one, as
// Client::BeginBatch does: items refused with UNAVAILABLE or ABORTED
// (outcome unknown; a whole batch answered so counts for each item) go again
// in a batch of their own after backoff (an ABORTED Begin only if it has an
// owner; Completes and Checkpoints are re-sent unchanged, which is safe),
// up to rpc.max_attempts rounds; an item whose outcome was unknown
// and is not settled answers ABORTED with IsOutcomeUnknown() true. Begins
// refused only because the answer already held the server's
// --max_batch_response_bytes of stored results (IsResultBudgetRefusal) go
// again at once without spending a round, in batches of at most as many
// items as that answer held results, for as long as each answer holds some.
//
// A batch closes at max_batch_items or 3 MiB of requests (so about 47
// Checkpoints of 64 KiB data each). A batch refused with RESOURCE_EXHAUSTED
// (a message limit on either side, e.g. several large DUPLICATE results in
// one answer) is sent again item by item. Both retries re-send each Begin
// with its owner, so give every Begin one (an anonymous Begin re-sent after
// the server applied it answers IN_USE).
//
// Session streams (CoalescingOptions::stream, off by default): while the
// servers have Dedup.Session, each call is instead one operation on a
// bidirectional stream to its group's leader (client/session.h: one stream
// per node, frames sent back to back, so calls made while a frame is out
// share the next one, within the server's max_in_flight), and answered the
// moment its own answer arrives. Its answer and retries are the batch
// item's above: an item error naming the leader (ItemError.leader) is
// followed at once like "dedup-leader", OUTCOME_UNKNOWN counts as an
// unknown outcome, and a stream that breaks fails its calls' attempts as a
// transport failure would (re-sent with the same owner or fence, after
// backoff; the next call opens a new stream). A server that answers the
// stream UNIMPLEMENTED, or INVALID_ARGUMENT "request: cannot be parsed" (a
// dedupd from before Session), has no Session: the client sends batch RPCs
// from then on, for its life. A result-budget refusal over a stream goes
// again at once (a bounded number of times) without spending a round; a
// tenant over its limits is retried after the delay its refusal names; a
// stream ended by a message limit (RESOURCE_EXHAUSTED, e.g. a frame of
// large results) sends its calls again one by one as batch RPCs.
//
// CheckpointBatch is newer than Checkpoint. A server without it answers
// UNIMPLEMENTED, or, as every dedupd that has Checkpoint but not
// CheckpointBatch does, INVALID_ARGUMENT "request: cannot be parsed as the
// request of .../CheckpointBatch" (IsUnparsedRequestReply). The batch's
// items then go again one by one as unary Checkpoint calls, with the same
// leader following and retries, and the client remembers it: its later
// Checkpoints are unary calls at once, for its life.
//
// Thread-safe. Callbacks run on gRPC's threads, one batch's in item order.
// They may start further calls, but must not block (the blocking Begin,
// Complete and Checkpoint, or RunOnce, included) nor destroy the client.
// The destructor waits until every call made before it was answered.
#ifndef DEDUP_CLIENT_COALESCING_CLIENT_H_
#define DEDUP_CLIENT_COALESCING_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/dedup_client.h"
#include "client/leader_router.h"
#include "client/shard_router.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/channel.h"

namespace dedup {

struct CoalescingOptions {
  // Deadline, attempts and backoff of each batch RPC (max_attempts 0: as for
  // Client, by the number of addresses).
  ClientOptions rpc;
  // Items per batch; the server refuses more than its --max_batch_items
  // (1000 by default).
  int max_batch_items = 256;
  // Batches of one kind (Begin, Complete or Checkpoint) outstanding at once. 1
  // gives the largest batches; more lets a batch leave while the server still
  // works on the previous one.
  int max_batches_in_flight = 2;
  // Send the calls as operations on a Session stream per server (one
  // stream to each node; see the class comment) while the servers have it;
  // false: batch RPCs always. Off by default until a sharded cluster with
  // more nodes than replicas answers streams as well as batches: there, a
  // node that does not host a call's group refuses a stream operation
  // (streams are not forwarded) where it forwards a batch, and some of
  // those refusals reached callers.
  bool stream = false;
};

// The machinery: client/coalescing_lane.h.
class OutstandingCalls;
class SessionPool;
template <typename Traits>
class CoalescingLane;
struct BeginLaneTraits;
struct CompleteLaneTraits;
struct CheckpointLaneTraits;

class CoalescingClient {
 public:
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;

  // The channel is shared; any credentials (leaders learnt from it are
  // reached through options.rpc.channel_factory).
  explicit CoalescingClient(std::shared_ptr<grpc::Channel> channel,
                            CoalescingOptions options = {});
  // The nodes of a group, tried in this order (see Client). Calls fail
  // INVALID_ARGUMENT when the list is empty.
  explicit CoalescingClient(std::vector<std::string> targets,
                            CoalescingOptions options = {});
  ~CoalescingClient();

  CoalescingClient(const CoalescingClient&) = delete;
  CoalescingClient& operator=(const CoalescingClient&) = delete;

  void BeginAsync(const BeginBatchItem& item, Done<v1::BeginResponse> done);
  void CompleteAsync(const CompleteBatchItem& item,
                     Done<v1::CompleteResponse> done);
  // An answer OK, STALE_FENCE, NOT_FOUND or ALREADY_COMPLETED is the
  // server's, as for Client::Checkpoint; an invalid item (e.g. an empty step)
  // is INVALID_ARGUMENT "step: ...".
  void CheckpointAsync(const CheckpointBatchItem& item,
                       Done<v1::CheckpointResponse> done);

  // Blocking forms, for threads that are not gRPC's.
  [[nodiscard]] absl::StatusOr<v1::BeginResponse> Begin(
      const BeginBatchItem& item);
  [[nodiscard]] absl::StatusOr<v1::CompleteResponse> Complete(
      const CompleteBatchItem& item);
  [[nodiscard]] absl::StatusOr<v1::CheckpointResponse> Checkpoint(
      const CheckpointBatchItem& item);

 private:
  CoalescingClient(std::shared_ptr<LeaderRouter> seed,
                   const CoalescingOptions& options);

  // How long a blocking call waits for the first fetch of the shard map.
  const absl::Duration deadline_;
  const std::unique_ptr<ShardRouter> shards_;
  const std::unique_ptr<OutstandingCalls> outstanding_;
  // After the lanes are gone (their calls all answered), closes the streams.
  const std::unique_ptr<SessionPool> sessions_;
  const std::unique_ptr<CoalescingLane<BeginLaneTraits>> begins_;
  const std::unique_ptr<CoalescingLane<CompleteLaneTraits>> completes_;
  const std::unique_ptr<CoalescingLane<CheckpointLaneTraits>> checkpoints_;
};

}  // namespace dedup

#endif  // DEDUP_CLIENT_COALESCING_CLIENT_H_
