// Bad input is refused with INVALID_ARGUMENT naming the field, changes
// nothing, and leaves the server serving.

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace dedup::testing {
namespace {

using v1::BeginResponse;
using v1::CompleteResponse;

class BadInputTest : public SharedServerTest<BadInputTest> {
 public:
  static std::vector<std::string> Flags() {
    return {"--durability=none", "--max_result_bytes=1024"};
  }
};

grpc::Status CheckHealth(const std::string& address, const std::string& service,
                         grpc::health::v1::HealthCheckResponse* resp) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 5000);
  return stub->Check(&ctx, req, resp);
}

// Expects INVALID_ARGUMENT with a message that starts with `field` and goes
// on to say which rule was broken.
void ExpectInvalid(const grpc::Status& s, const std::string& field,
                   const std::string& what) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << what << ": " << s.error_message();
  const std::string& msg = s.error_message();
  const bool names_field =
      absl::StartsWith(msg, field) && msg.size() > field.size() + 2 &&
      (msg[field.size()] == ':' || msg[field.size()] == ' ');
  EXPECT_TRUE(names_field) << what << ": message should start with '" << field
                           << "' and give the rule; got '" << msg << "'";
}

// One bad value for a key or namespace, tried on every RPC that takes it.
void ExpectEveryRpcRefuses(TestClient& c, const std::string& ns,
                           const std::string& key, const std::string& field,
                           const std::string& what) {
  v1::BeginRequest begin = c.BeginReq(key, "a");
  begin.set_namespace_(ns);
  v1::BeginResponse begin_resp;
  ExpectInvalid(c.BeginStatus(begin, &begin_resp), field, "Begin " + what);

  v1::CompleteRequest complete;
  complete.set_namespace_(ns);
  complete.set_key(key);
  complete.set_fence(1);
  complete.set_outcome(v1::SUCCESS);
  v1::CompleteResponse complete_resp;
  ExpectInvalid(c.CompleteStatus(complete, &complete_resp), field,
                "Complete " + what);

  v1::ReleaseRequest release;
  release.set_namespace_(ns);
  release.set_key(key);
  release.set_fence(1);
  v1::ReleaseResponse release_resp;
  ExpectInvalid(c.ReleaseStatus(release, &release_resp), field,
                "Release " + what);

  v1::RenewRequest renew;
  renew.set_namespace_(ns);
  renew.set_key(key);
  renew.set_fence(1);
  v1::RenewResponse renew_resp;
  ExpectInvalid(c.RenewStatus(renew, &renew_resp), field, "Renew " + what);

  v1::GetRequest get;
  get.set_namespace_(ns);
  get.set_key(key);
  v1::GetResponse get_resp;
  ExpectInvalid(c.GetStatus(get, &get_resp), field, "Get " + what);

  v1::ForgetRequest forget;
  forget.set_namespace_(ns);
  forget.set_key(key);
  v1::ForgetResponse forget_resp;
  ExpectInvalid(c.ForgetStatus(forget, &forget_resp), field, "Forget " + what);
}

TEST_F(BadInputTest, RefusesBadInputAndKeepsServing) {
  TestClient& c = client();
  const std::string kept = TestKey("kept");
  const BeginResponse r = c.Begin(kept, "a");
  ASSERT_EQ(r.status(), BeginResponse::STARTED);
  ASSERT_EQ(c.Complete(kept, r.fence(), "kept-result").status(),
            CompleteResponse::OK);

  const std::string ns = c.ns();
  ExpectEveryRpcRefuses(c, ns, "", "key", "empty key");
  ExpectEveryRpcRefuses(c, ns, std::string(256, 'k'), "key", "256-byte key");
  ExpectEveryRpcRefuses(c, ns, "line\nbreak", "key", "key with \\n");
  ExpectEveryRpcRefuses(c, ns, std::string("ctl\x01", 4), "key",
                        "key with \\x01");
  ExpectEveryRpcRefuses(c, ns, "del\x7f", "key", "key with DEL");
  ExpectEveryRpcRefuses(c, ns, "caf\xc3\xa9", "key", "non-ASCII key");
  ExpectEveryRpcRefuses(c, "", "k", "namespace", "empty namespace");
  ExpectEveryRpcRefuses(c, std::string(129, 'n'), "k", "namespace",
                        "129-byte namespace");
  ExpectEveryRpcRefuses(c, "has space", "k", "namespace", "space");
  ExpectEveryRpcRefuses(c, "star*", "k", "namespace", "'*'");

  const std::string victim = TestKey("victim");
  auto begin_with = [&](const std::function<void(v1::BeginRequest*)>& edit,
                        const std::string& field, const std::string& what) {
    v1::BeginRequest req = c.BeginReq(victim, "a");
    edit(&req);
    v1::BeginResponse resp;
    ExpectInvalid(c.BeginStatus(req, &resp), field, "Begin " + what);
  };
  begin_with([](auto* q) { q->set_args_hash(std::string(65, 'h')); },
             "args_hash", "65-byte args_hash");
  begin_with([](auto* q) { q->set_owner(std::string(129, 'o')); }, "owner",
             "129-byte owner");
  begin_with([](auto* q) { q->set_owner("tab\there"); }, "owner",
             "owner with a tab");
  begin_with([](auto* q) { q->set_ttl_s(2592001); }, "ttl_s", "ttl_s > 30 d");
  begin_with([](auto* q) { q->set_lease_ms(99); }, "lease_ms",
             "lease_ms < 100");
  begin_with([](auto* q) { q->set_lease_ms(3600001); }, "lease_ms",
             "lease_ms > 1 h");
  begin_with([](auto* q) { q->set_wait_ms(60001); }, "wait_ms",
             "wait_ms > 60 s");
  // None of the refused Begins created a record.
  EXPECT_FALSE(c.Get(victim).found());

  // Limits are inclusive.
  {
    v1::BeginRequest req =
        c.BeginReq(std::string(255, 'k'), "a", std::string(64, 'h'));
    req.set_namespace_(std::string(128, 'n'));
    req.set_owner(std::string(128, 'o'));
    req.set_lease_ms(100);
    req.set_ttl_s(2592000);
    v1::BeginResponse resp;
    const grpc::Status s = c.BeginStatus(req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.status(), BeginResponse::STARTED);
  }

  const BeginResponse v = c.Begin(victim, "a");
  ASSERT_EQ(v.status(), BeginResponse::STARTED);
  auto complete_with =
      [&](const std::function<void(v1::CompleteRequest*)>& edit,
          const std::string& field, const std::string& what) {
        v1::CompleteRequest req;
        req.set_namespace_(c.ns());
        req.set_key(victim);
        req.set_fence(v.fence());
        req.set_outcome(v1::SUCCESS);
        req.set_result("ok");
        edit(&req);
        v1::CompleteResponse resp;
        ExpectInvalid(c.CompleteStatus(req, &resp), field, "Complete " + what);
      };
  complete_with([](auto* q) { q->set_fence(0); }, "fence", "fence 0");
  complete_with([](auto* q) { q->set_outcome(v1::OUTCOME_UNSPECIFIED); },
                "outcome", "unspecified outcome");
  complete_with([](auto* q) { q->set_outcome(static_cast<v1::Outcome>(7)); },
                "outcome", "unknown outcome");
  complete_with([](auto* q) { q->set_result(std::string(1025, 'r')); },
                "result", "1025-byte result");
  complete_with([](auto* q) { q->set_ttl_s(2592001); }, "ttl_s",
                "ttl_s > 30 d");
  {
    v1::ReleaseRequest req;
    req.set_namespace_(c.ns());
    req.set_key(victim);
    v1::ReleaseResponse resp;
    ExpectInvalid(c.ReleaseStatus(req, &resp), "fence", "Release fence 0");
  }
  {
    v1::RenewRequest req;
    req.set_namespace_(c.ns());
    req.set_key(victim);
    v1::RenewResponse resp;
    ExpectInvalid(c.RenewStatus(req, &resp), "fence", "Renew fence 0");
    req.set_fence(v.fence());
    req.set_lease_ms(99);
    ExpectInvalid(c.RenewStatus(req, &resp), "lease_ms", "Renew lease 99");
    req.set_lease_ms(3600001);
    ExpectInvalid(c.RenewStatus(req, &resp), "lease_ms", "Renew lease > 1 h");
  }
  // The refused Completes recorded nothing; a result at the limit is fine.
  EXPECT_EQ(c.Get(victim).record().state(), v1::IN_FLIGHT);
  EXPECT_EQ(c.Complete(victim, v.fence(), std::string(1024, 'r')).status(),
            CompleteResponse::OK);

  // Still up, and the record stored before is intact.
  const BeginResponse dup = c.Begin(kept, "b");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.result(), "kept-result");
  EXPECT_EQ(dup.fence(), r.fence());

  grpc::health::v1::HealthCheckResponse health;
  const grpc::Status hs = CheckHealth(server().address(), "", &health);
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// The default limit is 1 MiB, checked on a server with default flags.
TEST(BadInputDefaultLimitsTest, ResultOverOneMebibyteIsRefused) {
  DEDUP_START_SERVER(server, {"--durability=none"});
  TestClient c(server->address());
  const BeginResponse r = c.Begin("big", "a");
  ASSERT_EQ(r.status(), BeginResponse::STARTED);

  v1::CompleteRequest req;
  req.set_namespace_(c.ns());
  req.set_key("big");
  req.set_fence(r.fence());
  req.set_outcome(v1::SUCCESS);
  req.set_result(std::string((1 << 20) + 1, 'r'));
  v1::CompleteResponse resp;
  ExpectInvalid(c.CompleteStatus(req, &resp), "result", "1 MiB + 1 result");

  const std::string max_result((1 << 20), 'm');
  EXPECT_EQ(c.Complete("big", r.fence(), max_result).status(),
            CompleteResponse::OK);
  const BeginResponse dup = c.Begin("big", "b");
  EXPECT_EQ(dup.status(), BeginResponse::DUPLICATE);
  EXPECT_EQ(dup.result(), max_result);
  c.Disconnect();
  const absl::Status stopped = server->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace dedup::testing
