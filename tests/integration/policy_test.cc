// Per-namespace policy (--policy_file): the longest prefix's defaults and
// limits apply, refusals name the policy, an ERROR outcome may allow a fresh
// attempt, and the file is reloaded (Admin.ReloadPolicy, SIGHUP) without a
// restart, an invalid file keeping the policy in force.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "dedup/v1/admin.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string Policy(int max_ttl_s) {
  return absl::StrCat(R"({"policies": [
  {"prefix": "billing:", "name": "billing", "default_ttl_s": 30,
   "max_ttl_s": )",
                      max_ttl_s, R"(, "max_result_bytes": 10,
   "on_error": "retry"},
  {"prefix": "billing:eu:", "name": "billing-eu", "max_lease_ms": 5000,
   "default_lease_ms": 2000}
]}
)");
}

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-policy");
    ASSERT_TRUE(dir.ok());
    dir_ = *dir;
    file_ = dir_ + "/policy.json";
    WriteFile(file_, Policy(60));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  grpc::Status Reload(v1::Admin::Stub& admin) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    v1::ReloadPolicyResponse r;
    return admin.ReloadPolicy(&ctx, v1::ReloadPolicyRequest(), &r);
  }
  grpc::Status BeginWithTtl(TestClient& c, const std::string& key,
                            uint32_t ttl_s, BeginResponse* out) {
    v1::BeginRequest req = c.BeginReq(key, "o");
    req.set_ttl_s(ttl_s);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    return c.stub()->Begin(&ctx, req, out);
  }

  std::string dir_;
  std::string file_;
};

TEST_F(PolicyTest, LongestPrefixAppliesAndRefusalsNameThePolicy) {
  DEDUP_START_SERVER(server, {"--durability=none", "--policy_file=" + file_});
  TestClient billing(server->address(), "billing:invoices");
  TestClient eu(server->address(), "billing:eu:invoices");
  TestClient other(server->address(), "shipping");
  BeginResponse r;
  grpc::Status s = BeginWithTtl(billing, "k1", 120, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "ttl_s: must be 1..60 (or 0 for 30), got 120 (policy \"billing\")");
  EXPECT_TRUE(BeginWithTtl(other, "k1", 120, &r).ok());

  // Defaults: the policy's TTL.
  v1::BeginRequest short_lease = billing.BeginReq("k2", "o");
  short_lease.set_lease_ms(1000);  // a record never expires before its lease
  const BeginResponse b = billing.Begin(short_lease);
  ASSERT_EQ(b.status(), BeginResponse::STARTED);
  EXPECT_LE(b.expires_at(), NowMs() + 30'000);
  EXPECT_GE(b.expires_at(), NowMs() + 25'000);

  // The longer prefix wins: billing:eu: has its own lease limit and
  // otherwise the server's flags (not billing's).
  // (Each ClientContext in a scope of its own: a live one keeps its
  // connection open after Disconnect, and the server's drain at Stop then
  // waits out --shutdown_grace_ms for it.)
  v1::BeginRequest long_lease = eu.BeginReq("k3", "o");
  long_lease.set_lease_ms(6000);
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    s = eu.stub()->Begin(&ctx, long_lease, &r);
  }
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("(policy \"billing-eu\")"),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(BeginWithTtl(eu, "k4", 120, &r).ok());

  // max_result_bytes.
  v1::CompleteRequest big;
  big.set_namespace_("billing:invoices");
  big.set_key("k2");
  big.set_fence(b.fence());
  big.set_outcome(v1::SUCCESS);
  big.set_result("eleven char");
  v1::CompleteResponse done;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    s = billing.stub()->Complete(&ctx, big, &done);
  }
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "result: at most 10 bytes, got 11 (policy \"billing\")");
  billing.Disconnect();
  eu.Disconnect();
  other.Disconnect();
  EXPECT_TRUE(server->Stop().ok());
}

TEST_F(PolicyTest, AnErrorOutcomeAllowsAFreshAttemptWhenThePolicySaysRetry) {
  DEDUP_START_SERVER(server, {"--durability=none", "--policy_file=" + file_});
  for (const std::string ns : {"billing:invoices", "shipping"}) {
    TestClient c(server->address(), ns);
    const BeginResponse b = c.Begin("k", "o");
    ASSERT_EQ(c.Complete("k", b.fence(), "declined", v1::ERROR).status(),
              v1::CompleteResponse::OK);
    const BeginResponse again = c.Begin("k", "o2");
    if (ns == "shipping") {
      EXPECT_EQ(again.status(), BeginResponse::DUPLICATE);  // replayed
      EXPECT_EQ(again.result(), "declined");
    } else {
      EXPECT_EQ(again.status(), BeginResponse::STARTED);
      EXPECT_TRUE(again.rerun());
      EXPECT_GT(again.fence(), b.fence());
      EXPECT_EQ(again.attempts(), 2u);
      // A success is replayed as always.
      ASSERT_EQ(c.Complete("k", again.fence(), "paid").status(),
                v1::CompleteResponse::OK);
      EXPECT_EQ(c.Begin("k", "o3").status(), BeginResponse::DUPLICATE);
    }
  }
  EXPECT_TRUE(server->Stop().ok());
}

TEST_F(PolicyTest, ReloadChangesLimitsAndABadFileKeepsTheOldPolicy) {
  DEDUP_START_SERVER(server, {"--durability=none", "--policy_file=" + file_});
  auto channel = grpc::CreateChannel(server->address(),
                                     grpc::InsecureChannelCredentials());
  auto admin = v1::Admin::NewStub(channel);
  TestClient c(server->address(), "billing:x");
  BeginResponse r;
  EXPECT_FALSE(BeginWithTtl(c, "a", 120, &r).ok());

  WriteFile(file_, Policy(200));
  ASSERT_TRUE(Reload(*admin).ok());
  EXPECT_TRUE(BeginWithTtl(c, "b", 120, &r).ok()) << "reload not applied";
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 10'000);
    v1::GetPolicyRequest req;
    req.set_namespace_("billing:x");
    v1::GetPolicyResponse p;
    ASSERT_TRUE(admin->GetPolicy(&ctx, req, &p).ok());
    EXPECT_EQ(p.policy(), "billing");
    EXPECT_EQ(p.max_ttl_s(), 200u);
    EXPECT_EQ(p.default_ttl_s(), 30u);
    EXPECT_EQ(p.on_error(), "retry");
  }

  // An unknown key on line 3: refused, naming it; the old policy stays.
  WriteFile(file_,
            "{\"policies\": [\n  {\"prefix\": \"billing:\",\n"
            "   \"max_tll_s\": 5}]}\n");
  const grpc::Status bad = Reload(*admin);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("line 3: policies[0]: unknown key "
                                     "\"max_tll_s\""),
            std::string::npos)
      << bad.error_message();
  EXPECT_TRUE(BeginWithTtl(c, "c", 120, &r).ok()) << "old policy lost";
  EXPECT_FALSE(BeginWithTtl(c, "d", 300, &r).ok());

  // SIGHUP reloads too (single node: the test signals the process).
  if (server->pid() > 0) {
    WriteFile(file_, Policy(100));
    ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
    bool applied = false;
    for (int i = 0; i < 100 && !applied; ++i) {
      applied = !BeginWithTtl(c, absl::StrCat("e", i), 120, &r).ok();
      if (!applied) SleepMs(50);
    }
    EXPECT_TRUE(applied) << "SIGHUP did not reload the policy";
  }
  admin.reset();
  channel.reset();
  c.Disconnect();
  EXPECT_TRUE(server->Stop().ok());
}

TEST_F(PolicyTest, AnInvalidFileRefusesTheStartNamingTheLine) {
  WriteFile(file_,
            "{\"policies\": [\n  {\"prefix\": \"a\", "
            "\"default_ttl_s\": 100, \"max_ttl_s\": 50}]}\n");
  absl::StatusOr<std::unique_ptr<ServerProcess>> started =
      ServerProcess::Start({"--durability=none", "--policy_file=" + file_});
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.status().message().find("line 2: policies[0]"),
            std::string::npos)
      << started.status();
}

}  // namespace
}  // namespace dedup::testing
