// Shared pieces of the client failover tests: fast retry options and
// scripted nodes that lead, follow or are gone.
#ifndef DEDUP_TESTS_CLIENT_FAILOVER_HELPERS_H_
#define DEDUP_TESTS_CLIENT_FAILOVER_HELPERS_H_

#include <atomic>
#include <memory>
#include <string>

#include "client/dedup_client.h"
#include "tests/client/scripted_node.h"

namespace dedup {

inline ClientOptions FastRetries() {
  ClientOptions options;
  options.deadline = absl::Seconds(2);
  options.max_attempts = 4;
  options.backoff = {absl::Milliseconds(1), absl::Milliseconds(5)};
  return options;
}

// A leader that answers every Begin STARTED with `fence`, every Complete OK
// and every Get found: false.
inline grpc::Status Lead(uint64_t fence, const std::string& method,
                         const google::protobuf::Message& /*request*/,
                         google::protobuf::Message* response) {
  if (method == "Begin") {
    auto* r = static_cast<v1::BeginResponse*>(response);
    r->set_status(v1::BeginResponse::STARTED);
    r->set_fence(fence);
    return grpc::Status::OK;
  }
  if (method == "Complete") {
    static_cast<v1::CompleteResponse*>(response)->set_status(
        v1::CompleteResponse::OK);
    return grpc::Status::OK;
  }
  if (method == "Get") return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, method);
}

inline testing::ScriptedNode::Script Leader(uint64_t fence = 1) {
  return [fence](const std::string& method, grpc::ServerContext*,
                 const google::protobuf::Message& request,
                 google::protobuf::Message* response) {
    return Lead(fence, method, request, response);
  };
}

inline testing::ScriptedNode::Script FollowerOf(const std::string& leader) {
  return
      [leader](const std::string&, grpc::ServerContext* context,
               const google::protobuf::Message&, google::protobuf::Message*) {
        return testing::NotLeader(context, leader);
      };
}

// A port nothing listens on: connections to it are refused.
inline std::string DeadAddress() {
  auto node = std::make_unique<testing::ScriptedNode>();
  std::string address = node->address();
  node.reset();
  return address;
}

inline BeginOptions Owner(const std::string& owner) {
  BeginOptions options;
  options.owner = owner;
  return options;
}

// Answers the first `unknown` calls of `method` ABORTED + outcome unknown,
// then as `then` does.
inline testing::ScriptedNode::Script UnknownThen(
    const std::string& method, int unknown,
    testing::ScriptedNode::Script then) {
  auto count = std::make_shared<std::atomic<int>>(0);
  return [=](const std::string& m, grpc::ServerContext* context,
             const google::protobuf::Message& request,
             google::protobuf::Message* response) {
    if (m == method && (*count)++ < unknown)
      return testing::OutcomeUnknown(context);
    return then(m, context, request, response);
  };
}

}  // namespace dedup

#endif  // DEDUP_TESTS_CLIENT_FAILOVER_HELPERS_H_
