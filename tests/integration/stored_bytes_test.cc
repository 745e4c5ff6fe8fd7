// The tenants file's stored_bytes limit against the real dedupd: a tenant
// that stores its limit is refused new claims (Begin, BeginBatch:
// RESOURCE_EXHAUSTED with a RetryInfo) while its Completes and other tenants
// go on, Forget frees its bytes, and after a restart the scan of the data dir
// counts them again (issue 15).
#include <chrono>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"
#include "tests/testing/test_pki.h"

namespace dedup::testing {
namespace stored_bytes_test {
namespace {

constexpr int64_t kLimit = 200'000;
constexpr size_t kResultBytes = 20'000;
constexpr char kQuotaToken[] = "quota-token-2c81";
constexpr char kNs[] = "quota:results";

class Client {
 public:
  explicit Client(const std::string& address)
      : stub_(v1::Dedup::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))) {}

  grpc::Status Begin(const std::string& token, const std::string& ns,
                     const std::string& key, uint64_t* fence) {
    v1::BeginRequest req;
    req.set_namespace_(ns);
    req.set_key(key);
    req.set_args_hash("args");
    req.set_owner("stored-bytes-test");
    v1::BeginResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, token);
    grpc::Status s = stub_->Begin(&ctx, req, &resp);
    if (s.ok()) {
      EXPECT_EQ(resp.status(), v1::BeginResponse::STARTED);
      *fence = resp.fence();
    }
    return s;
  }

  grpc::Status Complete(const std::string& token, const std::string& ns,
                        const std::string& key, uint64_t fence) {
    v1::CompleteRequest req;
    req.set_namespace_(ns);
    req.set_key(key);
    req.set_fence(fence);
    req.set_outcome(v1::SUCCESS);
    req.set_result(std::string(kResultBytes, 'r'));
    v1::CompleteResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, token);
    return stub_->Complete(&ctx, req, &resp);
  }

  // Begin then Complete with a kResultBytes result.
  grpc::Status Store(const std::string& token, const std::string& ns,
                     const std::string& key) {
    uint64_t fence = 0;
    grpc::Status s = Begin(token, ns, key, &fence);
    if (!s.ok()) return s;
    return Complete(token, ns, key, fence);
  }

  grpc::Status Get(const std::string& token, const std::string& key,
                   bool* found) {
    v1::GetRequest req;
    req.set_namespace_(kNs);
    req.set_key(key);
    v1::GetResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, token);
    grpc::Status s = stub_->Get(&ctx, req, &resp);
    *found = resp.found();
    return s;
  }

  grpc::Status Forget(const std::string& key) {
    v1::ForgetRequest req;
    req.set_namespace_(kNs);
    req.set_key(key);
    v1::ForgetResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx, kOpsToken);
    return stub_->Forget(&ctx, req, &resp);
  }

  grpc::Status BeginBatch(const std::string& token, int items,
                          v1::BeginBatchResponse* resp) {
    v1::BeginBatchRequest req;
    for (int i = 0; i < items; ++i) {
      v1::BeginRequest* item = req.add_items();
      item->set_namespace_(kNs);
      item->set_key(absl::StrCat("batch-", i));
      item->set_args_hash("args");
      item->set_owner("stored-bytes-test");
    }
    grpc::ClientContext ctx;
    Prepare(&ctx, token);
    return stub_->BeginBatch(&ctx, req, resp);
  }

 private:
  static void Prepare(grpc::ClientContext* ctx, const std::string& token) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(10));
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }

  std::unique_ptr<v1::Dedup::Stub> stub_;
};

// A metric's value; an error when the series is absent.
absl::StatusOr<double> Metric(const ServerProcess& server,
                              const std::string& series) {
  return ScrapeSample(server.metrics_port(), series);
}

constexpr char kQuotaGauge[] = R"(dedup_tenant_stored_bytes{tenant="quota"})";

// Polls the quota tenant's gauge (measured once a second) until `ok` holds
// for it; returns the last value (-1: never present).
template <typename Pred>
double AwaitQuotaUsage(const ServerProcess& server, Pred ok) {
  double last = -1;
  for (int i = 0; i < 500; ++i) {
    absl::StatusOr<double> v = Metric(server, kQuotaGauge);
    if (v.ok()) {
      last = *v;
      if (ok(last)) return last;
    }
    SleepMs(20);
  }
  return last;
}

void ExpectStoredBytesRefusal(const grpc::Status& s) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_NE(s.error_message().find("stored bytes"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(RetryDelayMs(s), 10'000);
}

// Stores records until refused, waiting after each for the server's measure
// to include it; returns how many were stored (-1 on another error).
int FillUntilRefused(Client& client, const ServerProcess& server,
                     const std::string& prefix) {
  for (int i = 0; i < 100; ++i) {
    const std::string key = absl::StrCat(prefix, i);
    // What the server has measured, every earlier record included.
    const double before = AwaitQuotaUsage(server, [](double) { return true; });
    grpc::Status s = client.Store(kQuotaToken, kNs, key);
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ExpectStoredBytesRefusal(s);
      return i;
    }
    if (!s.ok()) {
      ADD_FAILURE() << key << ": " << s.error_code() << " "
                    << s.error_message();
      return -1;
    }
    // The measure behind the limit is taken once a second: wait for it to
    // count this record, so the refusal comes exactly at the limit.
    const double after = AwaitQuotaUsage(
        server, [before](double v) { return v >= before + kResultBytes; });
    if (after < before + kResultBytes) {
      ADD_FAILURE() << "the usage never counted " << key << ": " << after;
      return -1;
    }
  }
  return 100;
}

TEST(StoredBytesTest, TenantAtItsLimitIsRefusedUntilForgetFreesBytes) {
  absl::StatusOr<std::string> dir = MakeTempDir("dedup-stored-bytes");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string tenants_file = *dir + "/tenants.json";
  WriteFileAtomically(
      tenants_file,
      WithLimitedTenant(StandardTenantsJson(), "quota", kQuotaToken,
                        absl::StrCat(R"({"stored_bytes": )", kLimit, "}")));
  const std::vector<std::string> flags = {"--tenants_file=" + tenants_file,
                                          "--metrics_address=127.0.0.1:0"};
  DEDUP_START_SERVER(server, flags);
  Client client(server->address());

  // Begun before the limit is reached, completed after it.
  uint64_t pending_fence = 0;
  ASSERT_TRUE(client.Begin(kQuotaToken, kNs, "pending", &pending_fence).ok());
  ASSERT_GE(AwaitQuotaUsage(*server, [](double v) { return v > 0; }), 0);

  // Each record holds its 20 KB result plus ~100 bytes of key and header:
  // ten of them reach 200 KB, and the eleventh is refused.
  const int stored = FillUntilRefused(client, *server, "r-");
  EXPECT_EQ(stored, 10);
  const double usage = AwaitQuotaUsage(*server, [](double) { return true; });
  EXPECT_GE(usage, kLimit);
  EXPECT_LT(usage, kLimit + kResultBytes);
  // A Complete is never refused for stored_bytes: its side effect already
  // happened, and a refusal would leave the claim to a takeover that runs it
  // again. Usage overshoots by the result instead.
  EXPECT_TRUE(client.Complete(kQuotaToken, kNs, "pending", pending_fence).ok());
  // Batches are refused whole, with the same RetryInfo.
  v1::BeginBatchResponse batch;
  ExpectStoredBytesRefusal(client.BeginBatch(kQuotaToken, 3, &batch));

  // What does not grow its usage stays allowed.
  bool found = false;
  ASSERT_TRUE(client.Get(kQuotaToken, "r-0", &found).ok());
  EXPECT_TRUE(found);
  // Another tenant is not affected.
  EXPECT_TRUE(client.Store(kBillingToken, "billing:x", "other").ok());
  absl::StatusOr<double> limited = Metric(
      *server,
      R"(dedup_tenant_limited_total{limit="stored_bytes",tenant="quota"})");
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_EQ(*limited, 1 + 3);  // a Begin, a batch of 3

  // Forget (an operator) frees bytes: the tenant may write again.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.Forget(absl::StrCat("r-", i)).ok());
  }
  const double freed =
      AwaitQuotaUsage(*server, [](double v) { return v < kLimit; });
  EXPECT_LT(freed, kLimit - kResultBytes);
  // It fills up to its limit again.
  EXPECT_EQ(FillUntilRefused(client, *server, "s-"), 2);
  const double full = AwaitQuotaUsage(*server, [](double) { return true; });
  EXPECT_GE(full, kLimit);

  // A restart counts the data dir again: the same usage, still refused.
  ASSERT_TRUE(server->Stop().ok());
  DEDUP_START_SERVER(restarted, flags, server->data_dir());
  Client after(restarted->address());
  EXPECT_EQ(AwaitQuotaUsage(*restarted, [](double v) { return v >= 0; }), full);
  ExpectStoredBytesRefusal(after.Store(kQuotaToken, kNs, "after-restart"));
  EXPECT_TRUE(after.Store(kBillingToken, "billing:x", "after-restart").ok());
  ASSERT_TRUE(restarted->Stop().ok());
  restarted.reset();
  std::filesystem::remove_all(*dir);
}

}  // namespace
}  // namespace stored_bytes_test
}  // namespace dedup::testing
