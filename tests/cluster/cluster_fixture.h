// The fixture of the cluster tests: a started 3-node group of real dedupd
// processes, and calls that follow the leader.
#ifndef DEDUP_TESTS_CLUSTER_CLUSTER_FIXTURE_H_
#define DEDUP_TESTS_CLUSTER_CLUSTER_FIXTURE_H_

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_harness.h"

namespace dedup {

using ::dedup::testing::ClusterHarness;

// The answer's trailing metadata `name`, or "".
inline std::string Trailer(const grpc::ClientContext& context,
                           const std::string& name) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(name);
  return it == trailers.end()
             ? ""
             : std::string(it->second.data(), it->second.size());
}

// The "dedup-leader" trailer of a follower's UNAVAILABLE, or "".
inline std::string LeaderHint(const grpc::ClientContext& context) {
  return Trailer(context, "dedup-leader");
}

// Sends `request` to `address`, following one redirect to the leader and
// retrying through an election for up to 10 s.
template <typename Service, typename Request, typename Response,
          typename Method>
grpc::Status CallService(const std::string& address, Method method,
                         const Request& request, Response* response) {
  std::string target = address;
  grpc::Status status;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto stub = Service::NewStub(testing::TestChannel(target));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    status = ((*stub).*method)(&context, request, response);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
    const std::string hint = LeaderHint(context);
    if (!hint.empty()) {
      target = hint;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return status;
}

template <typename Request, typename Response, typename Method>
grpc::Status Call(const std::string& address, Method method,
                  const Request& request, Response* response) {
  return CallService<v1::Dedup>(address, method, request, response);
}

inline v1::BeginRequest BeginOf(const std::string& key,
                                const std::string& owner) {
  v1::BeginRequest r;
  r.set_namespace_("cluster");
  r.set_key(key);
  r.set_args_hash("args");
  r.set_owner(owner);
  return r;
}

// The SUCCESS Complete of `key`'s execution `fence` with `result`.
inline v1::CompleteRequest CompleteOf(const std::string& key, uint64_t fence,
                                      const std::string& result) {
  v1::CompleteRequest r;
  r.set_namespace_("cluster");
  r.set_key(key);
  r.set_fence(fence);
  r.set_outcome(v1::SUCCESS);
  r.set_result(result);
  return r;
}

// A started 3-node group with helpers to write and check keys. Subclasses
// may pass flags for every node.
class ClusterTest : public ::testing::Test {
 protected:
  explicit ClusterTest(std::vector<std::string> flags = {})
      : cluster_(3, std::move(flags)) {}

  void SetUp() override {
    ASSERT_TRUE(cluster_.StartAll().ok());
    absl::StatusOr<int> leader = cluster_.WaitForLeader();
    ASSERT_TRUE(leader.ok()) << leader.status();
    leader_ = *leader;
  }

  // Begins and Completes `n` keys through node `via` in batches; returns
  // key -> (fence, result).
  std::map<std::string, std::pair<uint64_t, std::string>> BeginAndComplete(
      int via, int n, const std::string& prefix) {
    std::map<std::string, std::pair<uint64_t, std::string>> done;
    constexpr int kBatch = 500;
    for (int start = 0; start < n; start += kBatch) {
      v1::BeginBatchRequest begins;
      for (int i = start; i < std::min(n, start + kBatch); ++i) {
        *begins.add_items() = BeginOf(absl::StrCat(prefix, i), "w");
      }
      v1::BeginBatchResponse begun;
      grpc::Status s = Call(cluster_.client_address(via),
                            &v1::Dedup::Stub::BeginBatch, begins, &begun);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) return done;
      v1::CompleteBatchRequest completes;
      for (int i = 0; i < begun.items_size(); ++i) {
        const auto& item = begun.items(i);
        EXPECT_TRUE(item.has_response()) << item.error().message();
        EXPECT_EQ(item.response().status(), v1::BeginResponse::STARTED);
        v1::CompleteRequest* c = completes.add_items();
        c->set_namespace_("cluster");
        c->set_key(begins.items(i).key());
        c->set_fence(item.response().fence());
        c->set_outcome(v1::SUCCESS);
        c->set_result(absl::StrCat("result-", begins.items(i).key()));
        done[c->key()] = {c->fence(), c->result()};
      }
      v1::CompleteBatchResponse completed;
      s = Call(cluster_.client_address(via), &v1::Dedup::Stub::CompleteBatch,
               completes, &completed);
      EXPECT_TRUE(s.ok()) << s.error_message();
      for (const auto& item : completed.items()) {
        EXPECT_EQ(item.response().status(), v1::CompleteResponse::OK);
      }
    }
    return done;
  }

  // Every key answers DUPLICATE with its result when asked through `via`.
  // Begins and Completes `key` with `result` through node `via` (following
  // the leader); true once both were acknowledged.
  bool StoreResult(int via, const std::string& key, const std::string& result) {
    v1::BeginResponse begun;
    grpc::Status s = Call(cluster_.client_address(via), &v1::Dedup::Stub::Begin,
                          BeginOf(key, "w"), &begun);
    if (!s.ok() || begun.status() != v1::BeginResponse::STARTED) return false;
    const v1::CompleteRequest complete = CompleteOf(key, begun.fence(), result);
    v1::CompleteResponse completed;
    s = Call(cluster_.client_address(via), &v1::Dedup::Stub::Complete, complete,
             &completed);
    return s.ok() && completed.status() == v1::CompleteResponse::OK;
  }

  void ExpectDuplicates(
      int via,
      const std::map<std::string, std::pair<uint64_t, std::string>>& keys) {
    v1::BeginBatchRequest request;
    std::vector<std::string> order;
    auto flush = [&] {
      v1::BeginBatchResponse response;
      grpc::Status s = Call(cluster_.client_address(via),
                            &v1::Dedup::Stub::BeginBatch, request, &response);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_EQ(response.items_size(), request.items_size());
      for (int i = 0; i < response.items_size(); ++i) {
        const v1::BeginResponse& r = response.items(i).response();
        const auto& want = keys.at(order[i]);
        EXPECT_EQ(r.status(), v1::BeginResponse::DUPLICATE) << order[i];
        EXPECT_EQ(r.fence(), want.first) << order[i];
        EXPECT_EQ(r.result(), want.second) << order[i];
      }
      request.clear_items();
      order.clear();
    };
    for (const auto& [key, value] : keys) {
      *request.add_items() = BeginOf(key, "someone-else");
      order.push_back(key);
      if (request.items_size() == 500) flush();
    }
    if (request.items_size() > 0) flush();
  }

  void ExpectIdenticalReplicas() {
    absl::StatusOr<std::vector<v1::DigestResponse>> digests =
        cluster_.ConvergedDigests();
    ASSERT_TRUE(digests.ok()) << digests.status();
    ASSERT_GE(digests->size(), 2u);
    for (const v1::DigestResponse& d : *digests) {
      EXPECT_EQ(d.digest(), digests->front().digest());
      EXPECT_EQ(d.live_records(), digests->front().live_records());
    }
  }

  // Begins and Completes `n` keys one call at a time (one log entry each)
  // through `via`; returns key -> (fence, result).
  std::map<std::string, std::pair<uint64_t, std::string>> WriteOneByOne(
      int via, int n, const std::string& prefix) {
    std::map<std::string, std::pair<uint64_t, std::string>> done;
    for (int i = 0; i < n; ++i) {
      const std::string key = absl::StrCat(prefix, i);
      v1::BeginResponse begun;
      grpc::Status s = Call(cluster_.client_address(via),
                            &v1::Dedup::Stub::Begin, BeginOf(key, "w"), &begun);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) return done;
      v1::CompleteRequest complete;
      complete.set_namespace_("cluster");
      complete.set_key(key);
      complete.set_fence(begun.fence());
      complete.set_outcome(v1::SUCCESS);
      complete.set_result(absl::StrCat("result-", key));
      v1::CompleteResponse completed;
      s = Call(cluster_.client_address(via), &v1::Dedup::Stub::Complete,
               complete, &completed);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) return done;
      done[key] = {begun.fence(), complete.result()};
    }
    return done;
  }

  bool InstalledASnapshot(int id) {
    return cluster_.process(id)->captured_stderr().find(
               "installed a snapshot") != std::string::npos;
  }

  ClusterHarness cluster_;
  int leader_ = 0;
};

}  // namespace dedup

#endif  // DEDUP_TESTS_CLUSTER_CLUSTER_FIXTURE_H_
