// A group with TLS and tenants: clients need a credential on every node, and
// nodes copy snapshots from each other over TLS with their own operator
// token (--peer_token_file), so a lagging follower still catches up.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/channel_security.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/testing/test_pki.h"

namespace dedup {
namespace {

std::string* pki = nullptr;

std::string Pki(const std::string& name) { return *pki + "/" + name; }

class SecuredGroupTest : public ClusterTest {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> made = testing::MakeTestPki();
    ASSERT_TRUE(made.ok()) << made.status();
    pki = new std::string(*made);
    testing::WriteFileAtomically(Pki("tenants.json"),
                                 testing::StandardTenantsJson());
    testing::WriteFileAtomically(Pki("ops.token"), testing::kOpsToken);
    testing::WriteFileAtomically(Pki("billing.token"), testing::kBillingToken);
    // The harness itself (status, digests, writes) acts as the operator.
    testing::SetTestChannelFactory(OperatorChannels());
  }
  static void TearDownTestSuite() {
    testing::SetTestChannelFactory(nullptr);
    std::filesystem::remove_all(*pki);
    delete pki;
  }

  SecuredGroupTest()
      : ClusterTest({"--snapshot_threshold=16", "--snapshot_trailing=16",
                     "--tls_cert_file=" + Pki("server.pem"),
                     "--tls_key_file=" + Pki("server.key"),
                     "--tls_client_ca_file=" + Pki("ca.pem"),
                     "--tenants_file=" + Pki("tenants.json"),
                     "--peer_token_file=" + Pki("ops.token")}) {}

  static ChannelFactory Channels(const std::string& token_file) {
    absl::StatusOr<ChannelSecurity> security = ChannelSecurityFromFiles(
        Pki("ca.pem"), "", "", token_file.empty() ? "" : Pki(token_file));
    EXPECT_TRUE(security.ok()) << security.status();
    return SecureChannelFactory(*security);
  }
  static ChannelFactory OperatorChannels() { return Channels("ops.token"); }
};

TEST_F(SecuredGroupTest, LaggingFollowerInstallsASnapshotOverTls) {
  const int follower = leader_ == 3 ? 2 : 3;
  ASSERT_TRUE(cluster_.Stop(follower).ok());
  const auto missed = WriteOneByOne(leader_, 120, "missed");
  ASSERT_EQ(missed.size(), 120u);
  ASSERT_TRUE(cluster_.Start(follower).ok());
  ExpectIdenticalReplicas();
  EXPECT_TRUE(InstalledASnapshot(follower))
      << cluster_.process(follower)->captured_stderr();
  ExpectDuplicates(leader_, missed);
}

TEST_F(SecuredGroupTest, EveryNodeChecksCredentials) {
  for (int id = 1; id <= 3; ++id) {
    v1::ClusterStatusResponse status;
    grpc::ClientContext anonymous;
    anonymous.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
    const grpc::Status refused =
        v1::Cluster::NewStub(Channels("")(cluster_.client_address(id)))
            ->Status(&anonymous, v1::ClusterStatusRequest(), &status);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "node " << id << ": " << refused.error_message();
    grpc::ClientContext billing;
    billing.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    const grpc::Status not_operator =
        v1::Cluster::NewStub(
            Channels("billing.token")(cluster_.client_address(id)))
            ->Status(&billing, v1::ClusterStatusRequest(), &status);
    EXPECT_EQ(not_operator.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << "node " << id;
  }
}

}  // namespace
}  // namespace dedup
