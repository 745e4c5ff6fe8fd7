// The fixture of the TLS, mTLS and tenants tests (auth_test.cc, tls_test.cc):
// channels secured as a test asks, a PKI made by openssl once per suite, a
// tenants file per test, and one-call helpers that report the gRPC status.
#ifndef DEDUP_TESTS_INTEGRATION_AUTH_FIXTURE_H_
#define DEDUP_TESTS_INTEGRATION_AUTH_FIXTURE_H_

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

// How a test channel is secured.
struct Credentials {
  std::string ca;           // PEM root; empty: plaintext
  std::string cert, key;    // PEM client certificate (mTLS)
  std::string token;        // bearer token; empty: none
  std::string auth_header;  // raw "authorization" value, if not a token
};

inline Credentials Token(const std::string& token) {
  Credentials c;
  c.token = token;
  return c;
}
inline Credentials Header(const std::string& value) {
  Credentials c;
  c.auth_header = value;
  return c;
}
inline Credentials Tls(const std::string& ca, const std::string& token = "") {
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
    return Begin(*v1::Dedup::NewStub(Channel(address, c)), c, ns, key,
                 response);
  }
  // The same on a stub the caller keeps (one connection for many calls).
  static grpc::Status Begin(v1::Dedup::Stub& stub, const Credentials& c,
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
    return stub.Begin(&ctx, request, response != nullptr ? response : &ignored);
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

  inline static std::string* pki_ = nullptr;
  std::string dir_;
  std::string tenants_file_;
};

inline const Credentials kBilling = Token(kBillingToken);
inline const Credentials kOps = Token(kOpsToken);
inline const Credentials kNobody;

}  // namespace dedup::testing

#endif  // DEDUP_TESTS_INTEGRATION_AUTH_FIXTURE_H_
