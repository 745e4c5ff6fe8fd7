// What the CoalescingClient Checkpoint tests share, against scripted nodes
// (coalescing_checkpoint_test.cc) and the real dedupd
// (coalescing_checkpoint_integration_test.cc): a channel, fast-retry
// options, a Checkpoint item, and a collector of async answers.
#ifndef DEDUP_TESTS_CLIENT_COALESCING_CHECKPOINT_HELPERS_H_
#define DEDUP_TESTS_CLIENT_COALESCING_CHECKPOINT_HELPERS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "grpcpp/grpcpp.h"
#include "tests/client/failover_helpers.h"

namespace dedup::checkpoint_test {

inline std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

inline CoalescingOptions Options(int in_flight = 1, int max_items = 256) {
  CoalescingOptions options;
  // The batch RPCs' path (Session streams: session_*test.cc).
  options.stream = false;
  options.rpc = FastRetries();
  options.rpc.deadline = absl::Seconds(10);
  options.max_batches_in_flight = in_flight;
  options.max_batch_items = max_items;
  return options;
}

inline CheckpointBatchItem Item(const std::string& key, uint64_t fence,
                                const std::string& step = "step",
                                const std::string& data = "data") {
  CheckpointBatchItem item;
  item.ns = "ckpt";
  item.key = key;
  item.fence = fence;
  item.step = step;
  item.data = data;
  return item;
}

// Collects async answers by index.
class Answers {
 public:
  explicit Answers(int n) : answers_(n), pending_(n) {}
  CoalescingClient::Done<v1::CheckpointResponse> For(int i) {
    return [this, i](absl::StatusOr<v1::CheckpointResponse> answer) {
      answers_[i] = std::move(answer);
      if (--pending_ == 0) all_.Notify();
    };
  }
  bool Wait() { return all_.WaitForNotificationWithTimeout(absl::Seconds(30)); }
  const absl::StatusOr<v1::CheckpointResponse>& operator[](int i) const {
    return answers_[i];
  }

 private:
  std::vector<absl::StatusOr<v1::CheckpointResponse>> answers_;
  std::atomic<int> pending_;
  absl::Notification all_;
};

}  // namespace dedup::checkpoint_test

#endif  // DEDUP_TESTS_CLIENT_COALESCING_CHECKPOINT_HELPERS_H_
