#include "client/coalescing_client.h"

#include <algorithm>
#include <utility>

#include "absl/synchronization/notification.h"
#include "client/coalescing_lane.h"
#include "client/session_pool.h"

namespace dedup {

CoalescingClient::CoalescingClient(std::shared_ptr<grpc::Channel> channel,
                                   CoalescingOptions options)
    : CoalescingClient(std::make_shared<LeaderRouter>(
                           std::move(channel), options.rpc.channel_factory),
                       options) {}

CoalescingClient::CoalescingClient(std::vector<std::string> targets,
                                   CoalescingOptions options)
    : CoalescingClient(std::make_shared<LeaderRouter>(
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

CoalescingClient::CoalescingClient(std::shared_ptr<LeaderRouter> seed,
                                   const CoalescingOptions& options)
    : deadline_(options.rpc.deadline),
      shards_(std::make_unique<ShardRouter>(seed, deadline_)),
      outstanding_(std::make_unique<OutstandingCalls>()),
      sessions_(std::make_unique<SessionPool>(options.stream)),
      begins_(std::make_unique<CoalescingLane<BeginLaneTraits>>(
          *shards_, *sessions_, Resolved(options, *seed), *outstanding_)),
      completes_(std::make_unique<CoalescingLane<CompleteLaneTraits>>(
          *shards_, *sessions_, Resolved(options, *seed), *outstanding_)),
      checkpoints_(std::make_unique<CoalescingLane<CheckpointLaneTraits>>(
          *shards_, *sessions_, Resolved(options, *seed), *outstanding_)) {}

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
  shards_->AwaitFirstFetch(deadline_);
  return AwaitAnswer<v1::BeginResponse>(
      [&](Done<v1::BeginResponse> done) { BeginAsync(item, std::move(done)); });
}

absl::StatusOr<v1::CompleteResponse> CoalescingClient::Complete(
    const CompleteBatchItem& item) {
  shards_->AwaitFirstFetch(deadline_);
  return AwaitAnswer<v1::CompleteResponse>(
      [&](Done<v1::CompleteResponse> done) {
        CompleteAsync(item, std::move(done));
      });
}

absl::StatusOr<v1::CheckpointResponse> CoalescingClient::Checkpoint(
    const CheckpointBatchItem& item) {
  shards_->AwaitFirstFetch(deadline_);
  return AwaitAnswer<v1::CheckpointResponse>(
      [&](Done<v1::CheckpointResponse> done) {
        CheckpointAsync(item, std::move(done));
      });
}

}  // namespace dedup
