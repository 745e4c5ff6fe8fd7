// A test environment that keeps one channel, which has made a callback
// call, for the whole test binary: see PinCallbackQueue.
#ifndef DEDUP_TESTS_CLIENT_PIN_CALLBACK_QUEUE_H_
#define DEDUP_TESTS_CLIENT_PIN_CALLBACK_QUEUE_H_

#include <chrono>
#include <memory>

#include "absl/synchronization/notification.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace dedup {

// gRPC 1.51 runs callbacks on a process-wide completion queue that the
// channels using it share by reference count: the last channel released
// shuts it down, and a callback still returning then aborts the process
// ("prior > 0"). Tests here destroy each channel right after its last
// callback, so one channel holds the queue for the whole binary.
class PinCallbackQueue : public ::testing::Environment {
 public:
  void SetUp() override {
    channel_ =
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
    stub_ = v1::Dedup::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(1));
    v1::BeginRequest request;
    v1::BeginResponse response;
    absl::Notification done;
    stub_->async()->Begin(&context, &request, &response,
                          [&](grpc::Status) { done.Notify(); });
    done.WaitForNotification();
  }

 private:
  // Kept to the end of the process.
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Dedup::Stub> stub_;
};

inline const ::testing::Environment* const kPinCallbackQueue =
    ::testing::AddGlobalTestEnvironment(new PinCallbackQueue);

}  // namespace dedup

#endif  // DEDUP_TESTS_CLIENT_PIN_CALLBACK_QUEUE_H_
