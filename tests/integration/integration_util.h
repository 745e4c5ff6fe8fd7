// Helpers for integration tests that drive a real dedupd over raw gRPC stubs:
// a thin client whose calls fail the current test on any RPC error, a fixture
// sharing one server per suite, readable enum printing and clock helpers.
#ifndef DEDUP_TESTS_INTEGRATION_INTEGRATION_UTIL_H_
#define DEDUP_TESTS_INTEGRATION_INTEGRATION_UTIL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/shared_server.h"

namespace dedup::v1 {
// Found by gtest through ADL, so failures show names instead of numbers.
void PrintTo(BeginResponse::Status s, std::ostream* os);
void PrintTo(CompleteResponse::Status s, std::ostream* os);
void PrintTo(ReleaseResponse::Status s, std::ostream* os);
void PrintTo(RenewResponse::Status s, std::ostream* os);
void PrintTo(Outcome o, std::ostream* os);
void PrintTo(RecordState s, std::ostream* os);
}  // namespace dedup::v1

namespace dedup::testing {

// Server wall clock as the tests see it (same machine): Unix milliseconds.
[[nodiscard]] int64_t NowMs();
void SleepMs(int64_t ms);

// True when the tests (and the dedupd they start) run under a sanitizer
// (scripts/sanitize sets its options in the environment).
bool UnderSanitizer();

// True when the tests run against a cluster of several groups
// (DEDUP_TEST_CLUSTER=NxG with G > 1, tests/testing/server_process.h), where
// fences come from each group's counter: unique per group, not node-wide.
bool ShardedTestCluster();

// Peak resident memory of process `pid` (VmHWM), MiB; -1 if unknown.
[[nodiscard]] int64_t PeakRssMib(pid_t pid);
// How many descriptors process `pid` has open (/proc/<pid>/fd).
[[nodiscard]] int OpenDescriptors(pid_t pid);

// Delay of the google.rpc.RetryInfo in a refusal's status details
// (grpc-status-details-bin), ms; -1 when there is none.
[[nodiscard]] int64_t RetryDelayMs(const grpc::Status& s);

// "<TestName>/<suffix>": keys that never collide between tests sharing a
// server.
[[nodiscard]] std::string TestKey(absl::string_view suffix);

// Raw-stub calls in one namespace. Each call has a deadline; an RPC error is
// recorded as a test failure and a default response is returned, so the
// caller's expectations on the answer fail too. The *Status variants return
// the gRPC status instead, for tests that expect errors.
class TestClient {
 public:
  explicit TestClient(const std::string& address, std::string ns = "itest");

  [[nodiscard]] v1::BeginRequest BeginReq(
      const std::string& key, const std::string& owner,
      const std::string& args_hash = "args-hash") const;
  v1::BeginResponse Begin(const v1::BeginRequest& req);
  v1::BeginResponse Begin(const std::string& key, const std::string& owner);
  v1::CompleteResponse Complete(const std::string& key, uint64_t fence,
                                const std::string& result,
                                v1::Outcome outcome = v1::SUCCESS,
                                uint32_t ttl_s = 0);
  v1::ReleaseResponse Release(const std::string& key, uint64_t fence);
  v1::RenewResponse Renew(const std::string& key, uint64_t fence,
                          uint32_t lease_ms = 0);
  v1::GetResponse Get(const std::string& key);
  v1::ForgetResponse Forget(const std::string& key);

  grpc::Status BeginStatus(const v1::BeginRequest& req,
                           v1::BeginResponse* resp);
  grpc::Status CompleteStatus(const v1::CompleteRequest& req,
                              v1::CompleteResponse* resp);
  grpc::Status ReleaseStatus(const v1::ReleaseRequest& req,
                             v1::ReleaseResponse* resp);
  grpc::Status RenewStatus(const v1::RenewRequest& req,
                           v1::RenewResponse* resp);
  grpc::Status GetStatus(const v1::GetRequest& req, v1::GetResponse* resp);
  grpc::Status ForgetStatus(const v1::ForgetRequest& req,
                            v1::ForgetResponse* resp);

  // Closes the connection. Call it before stopping the server: an idle gRPC
  // client channel notices the server's GOAWAY only at its next backup poll
  // (every 5 s), and the server's drain waits for it.
  void Disconnect() { stub_.reset(); }

  const std::string& ns() const { return ns_; }
  v1::Dedup::Stub* stub() { return stub_.get(); }

 private:
  std::string ns_;
  std::unique_ptr<v1::Dedup::Stub> stub_;
};

// A context with a deadline `ms` from now that waits for the connection.
void SetDeadline(grpc::ClientContext* ctx, int64_t ms);

// A fixture whose tests share one dedupd started with Derived::Flags()
// (see SharedDedupdTest), each test with its own TestClient.
template <typename Derived>
class SharedServerTest : public SharedDedupdTest<Derived> {
 protected:
  void SetUp() override {
    SharedDedupdTest<Derived>::SetUp();
    if (::testing::Test::HasFatalFailure()) return;
    client_ = std::make_unique<TestClient>(this->server().address());
  }

  TestClient& client() { return *client_; }

 private:
  std::unique_ptr<TestClient> client_;
};

// Starts a server for one test, failing the test (fatally) if it does not.
#define DEDUP_START_SERVER(var, ...)                                     \
  std::unique_ptr<::dedup::testing::ServerProcess> var;                  \
  do {                                                                   \
    auto started_ = ::dedup::testing::ServerProcess::Start(__VA_ARGS__); \
    ASSERT_TRUE(started_.ok()) << started_.status();                     \
    var = *std::move(started_);                                          \
  } while (0)

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_INTEGRATION_INTEGRATION_UTIL_H_
