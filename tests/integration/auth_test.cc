// TLS, mTLS and tenants end to end against the real dedupd: certificates
// made by openssl at test time (tests/testing/make-test-pki), tenants files
// written by the tests, refusals, reloads and rotation.

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/admin.grpc.pb.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "dedup/v1/error_details.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"
#include "tests/testing/test_pki.h"

namespace dedup::testing {
namespace {

// How a test channel is secured.
struct Credentials {
  std::string ca;           // PEM root; empty: plaintext
  std::string cert, key;    // PEM client certificate (mTLS)
  std::string token;        // bearer token; empty: none
  std::string auth_header;  // raw "authorization" value, if not a token
};

Credentials Token(const std::string& token) {
  Credentials c;
  c.token = token;
  return c;
}
Credentials Header(const std::string& value) {
  Credentials c;
  c.auth_header = value;
  return c;
}
Credentials Tls(const std::string& ca, const std::string& token = "") {
  Credentials c;
  c.ca = ca;
  c.token = token;
  return c;
}

class AuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> dir = MakeTestPki();
    ASSERT_TRUE(dir.ok()) << dir.status();
    pki_ = new std::string(*dir);
  }
  static void TearDownTestSuite() {
    if (pki_ != nullptr) std::filesystem::remove_all(*pki_);
    delete pki_;
    pki_ = nullptr;
  }

  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("dedup-auth");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    tenants_file_ = dir_ + "/tenants.json";
    WriteFileAtomically(tenants_file_, StandardTenantsJson());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string Pki(const std::string& name) { return *pki_ + "/" + name; }
  static std::string Pem(const std::string& name) {
    return ReadWholeFile(Pki(name));
  }
  // TLS with ca.pem and the client certificate `name`.pem/.key.
  static Credentials Cert(const std::string& name) {
    Credentials c = Tls(Pem("ca.pem"));
    c.cert = Pem(name + ".pem");
    c.key = Pem(name + ".key");
    return c;
  }

  std::vector<std::string> TlsFlags(bool mtls) const {
    std::vector<std::string> flags = {"--tls_cert_file=" + Pki("server.pem"),
                                      "--tls_key_file=" + Pki("server.key")};
    if (mtls) flags.push_back("--tls_client_ca_file=" + Pki("ca.pem"));
    return flags;
  }

  static std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                                const Credentials& c) {
    grpc::ChannelArguments args;
    // Each channel its own connection: a test of a handshake must not reuse
    // another channel's subchannel.
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    if (c.ca.empty()) {
      return grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), args);
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = c.ca;
    ssl.pem_cert_chain = c.cert;
    ssl.pem_private_key = c.key;
    return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
  }

  // No wait_for_ready: a failed handshake answers UNAVAILABLE at once.
  static void Prepare(grpc::ClientContext* ctx, const Credentials& c) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    if (!c.token.empty()) {
      ctx->AddMetadata("authorization", absl::StrCat("Bearer ", c.token));
    } else if (!c.auth_header.empty()) {
      ctx->AddMetadata("authorization", c.auth_header);
    }
  }

  static grpc::Status Begin(const std::string& address, const Credentials& c,
                            const std::string& ns, const std::string& key,
                            v1::BeginResponse* response = nullptr) {
    v1::BeginResponse ignored;
    v1::BeginRequest request;
    request.set_namespace_(ns);
    request.set_key(key);
    request.set_args_hash("args");
    request.set_owner("owner-1");
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    return v1::Dedup::NewStub(Channel(address, c))
        ->Begin(&ctx, request, response != nullptr ? response : &ignored);
  }

  static grpc::Status Complete(const std::string& address, const Credentials& c,
                               const std::string& ns, const std::string& key,
                               uint64_t fence, const std::string& result) {
    v1::CompleteRequest request;
    request.set_namespace_(ns);
    request.set_key(key);
    request.set_fence(fence);
    request.set_outcome(v1::SUCCESS);
    request.set_result(result);
    v1::CompleteResponse response;
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    return v1::Dedup::NewStub(Channel(address, c))
        ->Complete(&ctx, request, &response);
  }

  static grpc::Status Get(const std::string& address, const Credentials& c,
                          const std::string& ns, const std::string& key,
                          v1::GetResponse* response) {
    v1::GetRequest request;
    request.set_namespace_(ns);
    request.set_key(key);
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    return v1::Dedup::NewStub(Channel(address, c))
        ->Get(&ctx, request, response);
  }

  static grpc::Status Forget(const std::string& address, const Credentials& c,
                             const std::string& ns, const std::string& key) {
    v1::ForgetRequest request;
    request.set_namespace_(ns);
    request.set_key(key);
    v1::ForgetResponse response;
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    return v1::Dedup::NewStub(Channel(address, c))
        ->Forget(&ctx, request, &response);
  }

  static grpc::Status Stats(const std::string& address, const Credentials& c) {
    v1::StatsResponse response;
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    return v1::Admin::NewStub(Channel(address, c))
        ->Stats(&ctx, v1::StatsRequest(), &response);
  }

  // Polls `probe` for up to 15 s until it returns `want`.
  template <typename Probe>
  static bool Eventually(grpc::StatusCode want, Probe probe) {
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < end) {
      if (probe().error_code() == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  static double Metric(const ServerProcess& server, const std::string& series) {
    absl::StatusOr<double> value = ScrapeSample(server.metrics_port(), series);
    EXPECT_TRUE(value.ok()) << series << ": " << value.status();
    return value.value_or(-1);
  }

  static std::string* pki_;
  std::string dir_;
  std::string tenants_file_;
};

std::string* AuthTest::pki_ = nullptr;

const Credentials kBilling = Token(kBillingToken);
const Credentials kOps = Token(kOpsToken);
const Credentials kNobody;

TEST_F(AuthTest, TokensBindTenantsToTheirNamespaces) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_,
                              "--metrics_address=127.0.0.1:0"});
  const std::string a = server->address();

  grpc::Status s = Begin(a, kNobody, "billing:inv", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "no credential"))
      << s.error_message();
  s = Begin(a, Token("not-a-token"), "billing:inv", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "not known"))
      << s.error_message();
  s = Begin(a, Header("Basic Zm9vOmJhcg=="), "billing:inv", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Its own namespace: the whole life of a key.
  v1::BeginResponse begun;
  ASSERT_TRUE(Begin(a, kBilling, "billing:inv", "k", &begun).ok());
  ASSERT_EQ(begun.status(), v1::BeginResponse::STARTED);
  ASSERT_TRUE(
      Complete(a, kBilling, "billing:inv", "k", begun.fence(), "sent").ok());
  v1::GetResponse got;
  ASSERT_TRUE(Get(a, kBilling, "billing:inv", "k", &got).ok());
  EXPECT_EQ(got.record().result(), "sent");

  // Another tenant's namespace: refused the same way whether or not the
  // key exists there.
  ASSERT_TRUE(Begin(a, kOps, "ops:jobs", "exists").ok());
  grpc::Status existing = Get(a, kBilling, "ops:jobs", "exists", &got);
  grpc::Status missing = Get(a, kBilling, "ops:jobs", "missing", &got);
  EXPECT_EQ(existing.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(existing.error_message(), missing.error_message());
  EXPECT_TRUE(absl::StrContains(existing.error_message(), "billing:"))
      << "the refusal should name the tenant's prefixes: "
      << existing.error_message();
  EXPECT_EQ(Begin(a, kBilling, "ops:jobs", "exists").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Complete(a, kBilling, "ops:jobs", "exists", 1, "x").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // ...and nothing changed there.
  ASSERT_TRUE(Get(a, kOps, "ops:jobs", "exists", &got).ok());
  EXPECT_EQ(got.record().state(), v1::IN_FLIGHT);
  // A prefix is a prefix of the namespace, not of the key.
  EXPECT_EQ(Begin(a, kBilling, "billing", "k").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  EXPECT_EQ(Metric(*server, "dedup_auth_refusals_total{reason=\"namespace\"}"),
            5);
  EXPECT_EQ(
      Metric(*server, "dedup_auth_refusals_total{reason=\"no_credential\"}"),
      1);
  EXPECT_EQ(
      Metric(*server, "dedup_auth_refusals_total{reason=\"unknown_token\"}"),
      2);
  EXPECT_EQ(Metric(*server, "dedup_tenants"), 2);
}

TEST_F(AuthTest, BatchesAreJudgedItemByItem) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_});
  auto stub = v1::Dedup::NewStub(Channel(server->address(), kBilling));
  v1::BeginBatchRequest begins;
  for (const char* ns : {"billing:a", "ops:b", "billing:c"}) {
    v1::BeginRequest* item = begins.add_items();
    item->set_namespace_(ns);
    item->set_key("k");
    item->set_args_hash("args");
  }
  v1::BeginBatchResponse begun;
  grpc::ClientContext ctx;
  Prepare(&ctx, kBilling);
  ASSERT_TRUE(stub->BeginBatch(&ctx, begins, &begun).ok());
  ASSERT_EQ(begun.items_size(), 3);
  EXPECT_EQ(begun.items(0).response().status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(begun.items(1).error().code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(
      absl::StartsWith(begun.items(1).error().message(), "items[1].namespace:"))
      << begun.items(1).error().message();
  EXPECT_EQ(begun.items(2).response().status(), v1::BeginResponse::STARTED);

  v1::CompleteBatchRequest completes;
  for (int i : {0, 2}) {
    v1::CompleteRequest* item = completes.add_items();
    item->set_namespace_(begins.items(i).namespace_());
    item->set_key("k");
    item->set_fence(begun.items(i).response().fence());
    item->set_outcome(v1::SUCCESS);
    item->set_result("done");
  }
  *completes.add_items() = completes.items(0);
  completes.mutable_items(2)->set_namespace_("ops:b");
  v1::CompleteBatchResponse completed;
  grpc::ClientContext ctx2;
  Prepare(&ctx2, kBilling);
  ASSERT_TRUE(stub->CompleteBatch(&ctx2, completes, &completed).ok());
  EXPECT_EQ(completed.items(0).response().status(), v1::CompleteResponse::OK);
  EXPECT_EQ(completed.items(1).response().status(), v1::CompleteResponse::OK);
  EXPECT_EQ(completed.items(2).error().code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // A checkpoint into a foreign namespace is refused for its item only.
  v1::CheckpointBatchRequest checkpoints;
  for (const char* ns : {"ops:b", "billing:q"}) {
    v1::CheckpointRequest* item = checkpoints.add_items();
    item->set_namespace_(ns);
    item->set_key("k");
    item->set_fence(1);
    item->set_step("s");
  }
  v1::CheckpointBatchResponse checkpointed;
  grpc::ClientContext ctx4;
  Prepare(&ctx4, kBilling);
  ASSERT_TRUE(
      stub->CheckpointBatch(&ctx4, checkpoints, &checkpointed).ok());
  EXPECT_EQ(checkpointed.items(0).error().code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(checkpointed.items(1).response().status(),
            v1::CheckpointResponse::NOT_FOUND);

  // No credential: the whole batch is refused.
  grpc::ClientContext ctx3;
  Prepare(&ctx3, kNobody);
  EXPECT_EQ(stub->BeginBatch(&ctx3, begins, &begun).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, ForgetAndAdminNeedTheOperatorRole) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_,
                              "--metrics_address=127.0.0.1:0"});
  const std::string a = server->address();
  ASSERT_TRUE(Begin(a, kBilling, "billing:x", "k").ok());
  grpc::Status s = Forget(a, kBilling, "billing:x", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "operator"))
      << s.error_message();
  EXPECT_EQ(Stats(a, kBilling).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Stats(a, kNobody).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  EXPECT_TRUE(Forget(a, kOps, "billing:x", "k").ok());
  EXPECT_TRUE(Stats(a, kOps).ok());
  v1::GetResponse got;
  ASSERT_TRUE(Get(a, kOps, "billing:x", "k", &got).ok());
  EXPECT_FALSE(got.found());
  EXPECT_EQ(Metric(*server, "dedup_auth_refusals_total{reason=\"role\"}"), 2);

  // Health probes need no credential (Kubernetes and load balancers).
  auto health = grpc::health::v1::Health::NewStub(Channel(a, kNobody));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, 3000);
  const grpc::Status checked = health->Check(&ctx, request, &response);
  EXPECT_TRUE(checked.ok()) << checked.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(AuthTest, ReloadRevokesATokenAndABadFileKeepsTheOldTenants) {
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_,
                              "--metrics_address=127.0.0.1:0"});
  const std::string a = server->address();
  ASSERT_TRUE(Begin(a, kBilling, "billing:x", "k").ok());

  // SIGHUP: the billing token is gone at once.
  WriteFileAtomically(tenants_file_,
                      StandardTenantsJson(/*with_billing_token=*/false));
  ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
  EXPECT_TRUE(Eventually(grpc::StatusCode::UNAUTHENTICATED,
                         [&] { return Begin(a, kBilling, "billing:x", "k"); }));

  // A broken file: refused with its line, the tenants in use stay.
  WriteFileAtomically(tenants_file_,
                      "{\"tenants\": [\n  {\"name\": \"ops\",\n"
                      "   \"roles\": [\"admin\"]}\n]}\n");
  ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!absl::StrContains(server->captured_stderr(), "not reloaded") &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string log = server->captured_stderr();
  EXPECT_TRUE(absl::StrContains(log, "tenants.json: line 2: tenants[0]"))
      << log;
  EXPECT_TRUE(Begin(a, kOps, "ops:y", "k").ok());
  EXPECT_EQ(Begin(a, kBilling, "billing:x", "k").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_GE(Metric(*server, "dedup_tenants_reloads_total{result=\"error\"}"),
            1);

  // A change to the file is picked up without a signal.
  WriteFileAtomically(tenants_file_, StandardTenantsJson());
  EXPECT_TRUE(Eventually(grpc::StatusCode::OK,
                         [&] { return Begin(a, kBilling, "billing:x", "k"); }));
}

TEST_F(AuthTest, TlsServesOnlyTls) {
  std::vector<std::string> flags = TlsFlags(/*mtls=*/false);
  flags.push_back("--tenants_file=" + tenants_file_);
  DEDUP_START_SERVER(server, flags);
  const std::string a = server->address();
  const Credentials tls = Tls(Pem("ca.pem"), kBillingToken);
  EXPECT_TRUE(Begin(a, tls, "billing:x", "k").ok());
  // Plaintext to a TLS port, and a client that trusts another CA, fail to
  // connect (UNAVAILABLE: nothing happened).
  EXPECT_EQ(Begin(a, kBilling, "billing:x", "k").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  const Credentials other_ca = Tls(Pem("ca2.pem"), kBillingToken);
  EXPECT_EQ(Begin(a, other_ca, "billing:x", "k").error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// Kubelet's grpc probes speak plaintext only: --health_address serves the
// same health status without TLS, and nothing else.
TEST_F(AuthTest, PlaintextHealthListenerBesideTls) {
  std::vector<std::string> flags = TlsFlags(/*mtls=*/false);
  flags.push_back("--tenants_file=" + tenants_file_);
  flags.push_back("--health_address=127.0.0.1:0");
  flags.push_back("--lame_duck_ms=3000");
  DEDUP_START_SERVER(server, flags);
  const std::string log = server->captured_stderr();
  const std::string marker = "grpc.health.v1 only) on 127.0.0.1:";
  const size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos) << log;
  const std::string health_address =
      "127.0.0.1:" +
      std::to_string(std::atoi(log.c_str() + at + marker.size()));
  auto plaintext =
      grpc::CreateChannel(health_address, grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(plaintext);
  auto check = [&](const std::string& service) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 3000);
    const grpc::Status s = health->Check(&ctx, request, &response);
    EXPECT_TRUE(s.ok()) << service << ": " << s.error_message();
    return response.status();
  };
  EXPECT_EQ(check(""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(check("dedup.v1.Dedup"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  // Nothing but health there, with or without a credential.
  {
    auto dedup = v1::Dedup::NewStub(plaintext);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, 3000);
    ctx.AddMetadata("authorization", std::string("Bearer ") + kBillingToken);
    v1::BeginRequest req;
    req.set_namespace_("billing:x");
    req.set_key("k");
    req.set_args_hash("h");
    v1::BeginResponse resp;
    EXPECT_EQ(dedup->Begin(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  // Draining (lame duck): NOT_SERVING there too, before the port closes.
  ASSERT_EQ(kill(server->pid(), SIGTERM), 0);
  grpc::health::v1::HealthCheckResponse::ServingStatus status =
      grpc::health::v1::HealthCheckResponse::SERVING;
  for (int i = 0;
       i < 40 && status == grpc::health::v1::HealthCheckResponse::SERVING;
       ++i) {
    SleepMs(25);
    status = check("");
  }
  EXPECT_EQ(status, grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_TRUE(server->WaitForExit(std::chrono::seconds(20)));
  EXPECT_EQ(server->exit_code(), 0);
}

TEST_F(AuthTest, ClientCertificatesIdentifyTenants) {
  std::vector<std::string> flags = TlsFlags(/*mtls=*/true);
  flags.push_back("--tenants_file=" + tenants_file_);
  DEDUP_START_SERVER(server, flags);
  const std::string a = server->address();
  const std::string ca = Pem("ca.pem");
  const Credentials billing = Cert("client-billing");
  EXPECT_TRUE(Begin(a, billing, "billing:x", "k").ok());
  EXPECT_EQ(Begin(a, billing, "ops:x", "k").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Forget(a, billing, "billing:x", "k").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const Credentials ops = Cert("client-ops");
  EXPECT_TRUE(Forget(a, ops, "billing:x", "k").ok());
  EXPECT_TRUE(Stats(a, ops).ok());

  // A valid certificate whose names are in no tenant.
  const Credentials stranger = Cert("client-stranger");
  grpc::Status s = Begin(a, stranger, "billing:x", "k");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "stranger"))
      << s.error_message();
  // A certificate from another CA, claiming billing's name: no handshake.
  const Credentials rogue = Cert("client-rogue");
  EXPECT_EQ(Begin(a, rogue, "billing:x", "k").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // No certificate: a token still works; a wrong token beside a good
  // certificate is refused.
  EXPECT_TRUE(Begin(a, Tls(ca, kBillingToken), "billing:x", "k").ok());
  Credentials wrong_token = billing;
  wrong_token.token = "wrong";
  EXPECT_EQ(Begin(a, wrong_token, "billing:x", "k").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, RotatedCertificateIsServedWithoutARestart) {
  const std::string cert = dir_ + "/server.pem";
  const std::string key = dir_ + "/server.key";
  std::filesystem::copy_file(Pki("server.pem"), cert);
  std::filesystem::copy_file(Pki("server.key"), key);
  DEDUP_START_SERVER(server,
                     {"--tls_cert_file=" + cert, "--tls_key_file=" + key,
                      "--tls_reload_interval_s=1"});
  const std::string a = server->address();
  const Credentials old_ca = Tls(Pem("ca.pem"));
  const Credentials new_ca = Tls(Pem("ca2.pem"));
  EXPECT_TRUE(Begin(a, old_ca, "any", "k").ok());
  EXPECT_EQ(Begin(a, new_ca, "any", "k").error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // Key first, then certificate, each renamed into place.
  WriteFileAtomically(key, Pem("server2.key"));
  WriteFileAtomically(cert, Pem("server2.pem"));
  EXPECT_TRUE(Eventually(grpc::StatusCode::OK,
                         [&] { return Begin(a, new_ca, "any", "k"); }));
  EXPECT_EQ(Begin(a, old_ca, "any", "k").error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// Limits per tenant: past them RESOURCE_EXHAUSTED with a RetryInfo in the
// status details; another tenant is not slowed.
TEST_F(AuthTest, TenantLimitsRefuseWithRetryInfo) {
  const std::string json =
      WithLimitedTenant(WithLimitedTenant(StandardTenantsJson(), "burst",
                                          "burst-token", R"({"rps": 20})"),
                        "parked", "parked-token", R"({"inflight": 2})");
  WriteFileAtomically(tenants_file_, json);
  DEDUP_START_SERVER(server, {"--tenants_file=" + tenants_file_});
  const std::string a = server->address();

  int ok = 0, refused = 0;
  grpc::Status last_refusal;
  for (int i = 0; i < 60; ++i) {
    const grpc::Status s =
        Begin(a, Token("burst-token"), "burst:x", absl::StrCat("k", i));
    if (s.ok()) {
      ++ok;
    } else {
      ASSERT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << s.error_message();
      ++refused;
      last_refusal = s;
    }
    // The other tenant is not limited by it.
    ASSERT_TRUE(Begin(a, kBilling, "billing:x", absl::StrCat("k", i)).ok());
  }
  EXPECT_GE(ok, 20);  // the burst, and what refilled meanwhile
  EXPECT_GT(refused, 0);
  EXPECT_TRUE(
      absl::StrContains(last_refusal.error_message(), "20 requests per second"))
      << last_refusal.error_message();
  v1::RpcStatus details;
  ASSERT_TRUE(details.ParseFromString(last_refusal.error_details()));
  EXPECT_EQ(details.code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(),
            "type.googleapis.com/google.rpc.RetryInfo");
  v1::RetryInfo retry;
  ASSERT_TRUE(retry.ParseFromString(details.details(0).value()));
  const int64_t delay_ms = retry.retry_delay().seconds() * 1000 +
                           retry.retry_delay().nanos() / 1'000'000;
  EXPECT_GT(delay_ms, 0);
  EXPECT_LE(delay_ms, 1000);

  // In flight: two Begins parked on a claimed key fill the tenant's slots.
  ASSERT_TRUE(Begin(a, Token("parked-token"), "parked:x", "held").ok());
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&, i] {
      v1::BeginRequest request;
      request.set_namespace_("parked:x");
      request.set_key("held");
      request.set_args_hash("args");
      request.set_owner(absl::StrCat("waiter-", i));
      request.set_wait_ms(1500);
      v1::BeginResponse response;
      grpc::ClientContext ctx;
      Prepare(&ctx, Token("parked-token"));
      EXPECT_TRUE(v1::Dedup::NewStub(Channel(a, kNobody))
                      ->Begin(&ctx, request, &response)
                      .ok());
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const grpc::Status third = Begin(a, Token("parked-token"), "parked:x", "k");
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(third.error_message(), "2 calls in flight"))
      << third.error_message();
  for (auto& waiter : waiters) waiter.join();
  // The slots are given back when the calls end.
  EXPECT_TRUE(Begin(a, Token("parked-token"), "parked:x", "k").ok());
}

// dedupd run to its exit, as a short-lived process.
ProcessResult RunDedupd(std::vector<std::string> flags) {
  flags.push_back("--metrics_address=");
  absl::StatusOr<ProcessResult> r = RunProcess(ServerBinary(), flags);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ProcessResult{};
}

TEST_F(AuthTest, UnsafeOrBrokenSettingsStopTheStart) {
  const std::string data = "--data_dir=" + dir_ + "/data";
  // Not loopback, plaintext, no tenants.
  ProcessResult r = RunDedupd({"--address=0.0.0.0:0", data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--insecure")) << r.output;
  // TLS but no tenants: still refused off loopback.
  std::vector<std::string> flags = TlsFlags(false);
  flags.push_back("--address=0.0.0.0:0");
  flags.push_back(data);
  r = RunDedupd(flags);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "authentication off")) << r.output;
  // A key that is not the certificate's.
  r = RunDedupd({"--tls_cert_file=" + Pki("server.pem"),
                 "--tls_key_file=" + Pki("server2.key"), data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--tls_key_file")) << r.output;
  r = RunDedupd({"--tls_cert_file=" + Pki("server.pem"), data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // A tenants file with an error names its line.
  WriteFileAtomically(tenants_file_,
                      "{\"tenants\": [\n  {\"name\": \"x\", \"token_sha256\": "
                      "[\"abc\"],\n   \"roles\": [\"client\"]}]}\n");
  r = RunDedupd({"--tenants_file=" + tenants_file_, data});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "line 2: tenants[0].token_sha256[0]"))
      << r.output;

  // --insecure accepts the risk, and says so.
  DEDUP_START_SERVER(server, {"--address=0.0.0.0:0", "--insecure"});
  EXPECT_TRUE(absl::StrContains(server->captured_stderr(), "WARNING"))
      << server->captured_stderr();
  const absl::Status stopped = server->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace dedup::testing
