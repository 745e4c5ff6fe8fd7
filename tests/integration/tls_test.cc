// TLS and mTLS end to end against the real dedupd: certificates made by
// openssl at test time (tests/testing/make-test-pki), TLS-only serving, the
// plaintext health listener, client certificates naming tenants, rotation.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/integration/auth_fixture.h"

namespace dedup::testing {
namespace {

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
  const std::string health_address = server->ready().health_address;
  ASSERT_TRUE(absl::StartsWith(health_address, "127.0.0.1:")) << health_address;
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

}  // namespace
}  // namespace dedup::testing
