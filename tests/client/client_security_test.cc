// The C++ client and dedupctl over TLS, mTLS and bearer tokens against the
// real dedupd with a tenants file (certificates from make-test-pki).
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/coalescing_client.h"
#include "client/dedup_client.h"
#include "common/channel_security.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/client/run_ctl.h"
#include "tests/testing/server_process.h"
#include "tests/testing/test_pki.h"

namespace dedup {
namespace {

using ::dedup::testing::CtlResult;
using ::dedup::testing::Field;
using ::dedup::testing::RunCtl;
using ::testing::HasSubstr;

class ClientSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> pki = testing::MakeTestPki();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = new std::string(*pki);
    tenants_file_ = new std::string(*pki_ + "/tenants.json");
    for (const auto& [name, token] :
         {std::pair<const char*, const char*>{"billing.token",
                                              testing::kBillingToken},
          {"ops.token", testing::kOpsToken},
          {"wrong.token", "not-a-token"}}) {
      testing::WriteFileAtomically(*pki_ + "/" + name,
                                   std::string(token) + "\n");
    }
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*pki_);
    delete pki_;
    delete tenants_file_;
  }

  void SetUp() override {
    testing::WriteFileAtomically(*tenants_file_,
                                 testing::StandardTenantsJson());
    absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server =
        testing::ServerProcess::Start({"--durability=none",
                                       "--tls_cert_file=" + Pki("server.pem"),
                                       "--tls_key_file=" + Pki("server.key"),
                                       "--tls_client_ca_file=" + Pki("ca.pem"),
                                       "--tenants_file=" + *tenants_file_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  static std::string Pki(const std::string& name) { return *pki_ + "/" + name; }

  // A client over TLS with ca.pem, `token_file` and the client certificate
  // `cert` (each "" for none). Two attempts: refusals must not be retried,
  // and handshake failures should fail fast here.
  std::unique_ptr<Client> MakeClient(const std::string& token_file,
                                     const std::string& cert = "") const {
    absl::StatusOr<ChannelSecurity> security = ChannelSecurityFromFiles(
        Pki("ca.pem"), cert.empty() ? "" : Pki(cert + ".pem"),
        cert.empty() ? "" : Pki(cert + ".key"),
        token_file.empty() ? "" : Pki(token_file));
    EXPECT_TRUE(security.ok()) << security.status();
    ClientOptions options;
    options.deadline = absl::Seconds(3);
    options.max_attempts = 2;
    options.channel_factory = SecureChannelFactory(*security);
    return std::make_unique<Client>(server_->address(), options);
  }

  CtlResult Ctl(std::vector<std::string> args) const {
    args.insert(args.begin(), {"--address=" + server_->address(),
                               "--tls_ca_file=" + Pki("ca.pem")});
    return RunCtl(args);
  }

  static std::string* pki_;
  static std::string* tenants_file_;
  std::unique_ptr<testing::ServerProcess> server_;
};

std::string* ClientSecurityTest::pki_ = nullptr;
std::string* ClientSecurityTest::tenants_file_ = nullptr;

TEST_F(ClientSecurityTest, ClientSendsItsTokenOverTls) {
  std::unique_ptr<Client> billing = MakeClient("billing.token");
  absl::StatusOr<v1::BeginResponse> begun =
      billing->Begin("billing:orders", "o-1", "args");
  ASSERT_TRUE(begun.ok()) << begun.status();
  ASSERT_EQ(begun->status(), v1::BeginResponse::STARTED);
  absl::StatusOr<v1::CompleteResponse> completed = billing->Complete(
      "billing:orders", "o-1", begun->fence(), v1::SUCCESS, "charged");
  ASSERT_TRUE(completed.ok()) << completed.status();

  // Refusals come back as they are, at once (not retried as UNAVAILABLE).
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::BeginResponse> foreign =
      billing->Begin("ops:jobs", "o-1", "args");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(billing->Forget("billing:orders", "o-1").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(
      MakeClient("")->Begin("billing:orders", "o-2", "args").status().code(),
      absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(MakeClient("wrong.token")
                ->Begin("billing:orders", "o-2", "args")
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);

  // The operator forgets it.
  absl::StatusOr<v1::ForgetResponse> forgot =
      MakeClient("ops.token")->Forget("billing:orders", "o-1");
  ASSERT_TRUE(forgot.ok()) << forgot.status();
  EXPECT_TRUE(forgot->existed());
}

TEST_F(ClientSecurityTest, ClientCertificateIdentifiesTheTenant) {
  std::unique_ptr<Client> billing = MakeClient("", "client-billing");
  absl::StatusOr<v1::BeginResponse> begun =
      billing->Begin("billing:orders", "c-1", "args");
  ASSERT_TRUE(begun.ok()) << begun.status();
  EXPECT_EQ(begun->status(), v1::BeginResponse::STARTED);
  EXPECT_EQ(billing->Begin("ops:jobs", "c-1", "args").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(MakeClient("", "client-stranger")
                ->Begin("billing:orders", "c-1", "args")
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(ClientSecurityTest, CoalescedItemsAreJudgedOneByOne) {
  absl::StatusOr<ChannelSecurity> security =
      ChannelSecurityFromFiles(Pki("ca.pem"), "", "", Pki("billing.token"));
  ASSERT_TRUE(security.ok()) << security.status();
  CoalescingOptions options;
  options.rpc.deadline = absl::Seconds(3);
  options.rpc.channel_factory = SecureChannelFactory(*security);
  CoalescingClient client(std::vector<std::string>{server_->address()},
                          options);
  absl::StatusOr<v1::BeginResponse> mine =
      client.Begin({"billing:orders", "b-1", "args", "owner-1"});
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->status(), v1::BeginResponse::STARTED);
  absl::StatusOr<v1::BeginResponse> foreign =
      client.Begin({"ops:jobs", "b-1", "args", "owner-1"});
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kPermissionDenied);
}

// A tenant over its requests per second gets RESOURCE_EXHAUSTED with a
// RetryInfo; the client waits as told and gets through, on unary and
// coalesced calls alike.
TEST_F(ClientSecurityTest, ClientHonoursTheServersRetryDelay) {
  const std::string json = testing::WithLimitedTenant(
      testing::StandardTenantsJson(), "slow", "slow-token", R"({"rps": 5})");
  testing::WriteFileAtomically(*tenants_file_, json);
  testing::WriteFileAtomically(Pki("slow.token"), "slow-token");
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  std::unique_ptr<Client> slow = MakeClient("slow.token");
  for (int i = 0; i < 50 && !slow->Begin("slow:x", "probe", "args").ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // Two attempts each (MakeClient): with 5 per second and 15 calls, some
  // are told to wait, and get through on their second attempt.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 15; ++i) {
    absl::StatusOr<v1::BeginResponse> r =
        slow->Begin("slow:x", absl::StrCat("k", i), "args");
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(1500));

  // One attempt only: the refusal reaches the caller, with its reason.
  absl::StatusOr<ChannelSecurity> security =
      ChannelSecurityFromFiles(Pki("ca.pem"), "", "", Pki("slow.token"));
  ASSERT_TRUE(security.ok());
  ClientOptions once;
  once.max_attempts = 1;
  once.channel_factory = SecureChannelFactory(*security);
  Client impatient(server_->address(), once);
  absl::Status refused;
  for (int i = 0; i < 20 && refused.ok(); ++i) {
    refused = impatient.Begin("slow:x", absl::StrCat("j", i), "args").status();
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("requests per second"));

  // Coalesced: a refused batch waits and goes again whole.
  CoalescingOptions options;
  options.rpc.deadline = absl::Seconds(3);
  options.rpc.channel_factory = SecureChannelFactory(*security);
  CoalescingClient coalesced(std::vector<std::string>{server_->address()},
                             options);
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<v1::BeginResponse> r = coalesced.Begin(
        {"slow:x", absl::StrCat("c", i), "args", absl::StrCat("owner-", i)});
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
  }
}

TEST_F(ClientSecurityTest, DedupctlTakesTlsAndTokenOptions) {
  CtlResult begin = Ctl(
      {"--token_file=" + Pki("billing.token"), "begin", "billing:ctl", "k-1"});
  ASSERT_EQ(begin.exit_code, 0) << begin.err;
  EXPECT_EQ(Field(begin.out, "status"), "STARTED");

  CtlResult anonymous = Ctl({"get", "billing:ctl", "k-1"});
  EXPECT_EQ(anonymous.exit_code, 2) << anonymous.out;
  EXPECT_THAT(anonymous.err, HasSubstr("UNAUTHENTICATED"));
  CtlResult forget = Ctl(
      {"--token_file=" + Pki("billing.token"), "forget", "billing:ctl", "k-1"});
  EXPECT_EQ(forget.exit_code, 2) << forget.out;
  EXPECT_THAT(forget.err, HasSubstr("PERMISSION_DENIED"));
  CtlResult stats = Ctl({"--token_file=" + Pki("billing.token"), "stats"});
  EXPECT_EQ(stats.exit_code, 2) << stats.out;
  EXPECT_THAT(stats.err, HasSubstr("PERMISSION_DENIED"));

  // The operator by its client certificate.
  CtlResult ops_stats =
      Ctl({"--tls_cert_file=" + Pki("client-ops.pem"),
           "--tls_key_file=" + Pki("client-ops.key"), "stats"});
  EXPECT_EQ(ops_stats.exit_code, 0) << ops_stats.err;

  // Plaintext to the TLS port fails to connect; a missing token file is a
  // usage error.
  CtlResult plaintext =
      RunCtl({"--address=" + server_->address(), "--deadline_ms=500",
              "--follow_leader=false", "get", "billing:ctl", "k-1"});
  EXPECT_EQ(plaintext.exit_code, 2);
  EXPECT_THAT(plaintext.err, HasSubstr("UNAVAILABLE"));
  CtlResult no_file = Ctl({"--token_file=" + Pki("absent.token"), "stats"});
  EXPECT_EQ(no_file.exit_code, 64);
  EXPECT_THAT(no_file.err, HasSubstr("absent.token"));

  // A reload that revokes billing's token.
  testing::WriteFileAtomically(
      *tenants_file_,
      testing::StandardTenantsJson(/*with_billing_token=*/false));
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  CtlResult revoked;
  for (int i = 0; i < 50; ++i) {
    revoked = Ctl(
        {"--token_file=" + Pki("billing.token"), "get", "billing:ctl", "k-1"});
    if (revoked.exit_code != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(revoked.exit_code, 2) << revoked.out;
  EXPECT_THAT(revoked.err, HasSubstr("UNAUTHENTICATED"));
}

// The DEDUP_* variables: the C++ client when asked (ClientFromEnvironment)
// and dedupctl by default, TLS, the token and mTLS from files named there,
// the address a list whose first node is down. Explicit settings win.
TEST_F(ClientSecurityTest, EnvironmentVariablesConfigureClientAndDedupctl) {
  const std::string list = "127.0.0.1:1, " + server_->address();
  setenv("DEDUP_ADDRESS", list.c_str(), 1);
  setenv("DEDUP_CA_FILE", Pki("ca.pem").c_str(), 1);
  setenv("DEDUP_TOKEN_FILE", Pki("billing.token").c_str(), 1);
  ClientOptions options;
  options.deadline = absl::Seconds(3);
  absl::StatusOr<std::unique_ptr<Client>> client =
      ClientFromEnvironment(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::BeginResponse> begin =
      (*client)->Begin("billing:env", "k-1", "args");
  ASSERT_TRUE(begin.ok()) << begin.status();
  EXPECT_EQ(begin->status(), v1::BeginResponse::STARTED);
  EXPECT_EQ((*client)->options().deadline, absl::Seconds(3));

  // An explicit channel factory wins: plaintext to the TLS port fails.
  options.max_attempts = 1;
  options.channel_factory = [](const std::string& address) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  };
  absl::StatusOr<ClientOptions> explicit_options =
      ClientOptionsFromEnvironment(options);
  ASSERT_TRUE(explicit_options.ok());
  Client plaintext(server_->address(), *explicit_options);
  EXPECT_EQ(plaintext.Get("billing:env", "k-1").status().code(),
            absl::StatusCode::kUnavailable);

  setenv("DEDUP_TOKEN_FILE", Pki("absent.token").c_str(), 1);
  EXPECT_THAT(ClientFromEnvironment().status().message(),
              HasSubstr("absent.token"));
  unsetenv("DEDUP_ADDRESS");
  EXPECT_EQ(ClientFromEnvironment().status().code(),
            absl::StatusCode::kFailedPrecondition);
  unsetenv("DEDUP_CA_FILE");
  unsetenv("DEDUP_TOKEN_FILE");

  const std::vector<std::string> env = {
      "DEDUP_ADDRESS=" + list, "DEDUP_CA_FILE=" + Pki("ca.pem"),
      "DEDUP_TOKEN_FILE=" + Pki("billing.token")};
  CtlResult get = RunCtl({"get", "billing:env", "k-1"}, env);
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(Field(get.out, "found"), "true");
  // The operator by its client certificate, from the environment too.
  CtlResult stats =
      RunCtl({"stats"}, {"DEDUP_ADDRESS=" + server_->address(),
                         "DEDUP_CA_FILE=" + Pki("ca.pem"),
                         "DEDUP_CERT_FILE=" + Pki("client-ops.pem"),
                         "DEDUP_KEY_FILE=" + Pki("client-ops.key")});
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  // A flag wins over its variable: the wrong token is refused.
  CtlResult wrong = RunCtl(
      {"--token_file=" + Pki("wrong.token"), "get", "billing:env", "k-1"}, env);
  EXPECT_EQ(wrong.exit_code, 2) << wrong.out;
  EXPECT_THAT(wrong.err, HasSubstr("UNAUTHENTICATED"));
}

}  // namespace
}  // namespace dedup
