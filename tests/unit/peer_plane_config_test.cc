// When dedupd may talk plaintext to its Raft peers, and what TLS needs
// (server/peer_plane_config.h).
#include "server/peer_plane_config.h"

#include <filesystem>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/test_pki.h"

ABSL_DECLARE_FLAG(std::string, peer_tls_cert_file);
ABSL_DECLARE_FLAG(std::string, peer_tls_key_file);
ABSL_DECLARE_FLAG(uint32_t, max_raft_message_mb);
ABSL_DECLARE_FLAG(std::string, peer_tls_ca_file);

namespace dedup {
namespace {

constexpr uint64_t kLogBudget = 256 << 20;

// libraft sends a lagging follower its whole backlog in one message: a
// limit below the log's budget would shut it out for good.
TEST(PeerPlaneConfigTest, MessageLimitCoversTheLogBudget) {
  SecurityConfig security;
  absl::SetFlag(&FLAGS_max_raft_message_mb, 64);
  absl::StatusOr<std::shared_ptr<PeerPlane>> small =
      PeerPlaneFromFlags(security, "127.0.0.2:7001", kLogBudget, nullptr);
  ASSERT_FALSE(small.ok());
  EXPECT_TRUE(
      absl::StrContains(small.status().message(), "--max_raft_message_mb"))
      << small.status();
  absl::SetFlag(&FLAGS_max_raft_message_mb, 320);
  EXPECT_TRUE(
      PeerPlaneFromFlags(security, "127.0.0.2:7001", kLogBudget, nullptr).ok());
  absl::SetFlag(&FLAGS_max_raft_message_mb, 0);  // the default: derived
  EXPECT_TRUE(
      PeerPlaneFromFlags(security, "127.0.0.2:7001", kLogBudget, nullptr).ok());
}

TEST(PeerPlaneConfigTest, PlaintextOnlyOnLoopbackOrWithInsecure) {
  SecurityConfig security;
  absl::StatusOr<std::shared_ptr<PeerPlane>> refused =
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--raft_address"))
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--insecure"));
  EXPECT_TRUE(
      PeerPlaneFromFlags(security, "127.0.0.2:7001", kLogBudget, nullptr).ok());
  security.insecure = true;
  EXPECT_TRUE(
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr).ok());
}

TEST(PeerPlaneConfigTest, TlsNeedsThePeerCa) {
  absl::StatusOr<std::string> pki = testing::MakeTestPki();
  ASSERT_TRUE(pki.ok()) << pki.status();
  SecurityConfig security;
  security.tls_cert_file = *pki + "/server.pem";
  security.tls_key_file = *pki + "/server.key";
  absl::StatusOr<std::shared_ptr<PeerPlane>> no_ca =
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr);
  ASSERT_FALSE(no_ca.ok());
  EXPECT_TRUE(absl::StrContains(no_ca.status().message(), "--peer_tls_ca_file"))
      << no_ca.status();
  security.tls_client_ca_file = *pki + "/ca.pem";
  // TLS on: no --insecure needed off loopback.
  EXPECT_TRUE(
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr).ok());
  security.tls_key_file = *pki + "/client-ops.key";  // not the cert's key
  EXPECT_FALSE(
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr).ok());
  // Dedicated peer files override the client port's, both or neither.
  absl::SetFlag(&FLAGS_peer_tls_cert_file, *pki + "/server2.pem");
  EXPECT_TRUE(absl::StrContains(
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr)
          .status()
          .message(),
      "give both or neither"));
  absl::SetFlag(&FLAGS_peer_tls_key_file, *pki + "/server2.key");
  EXPECT_TRUE(
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr).ok());
  absl::SetFlag(&FLAGS_peer_tls_cert_file, std::string());
  absl::SetFlag(&FLAGS_peer_tls_key_file, std::string());
  std::filesystem::remove_all(*pki);
}

// A group whose clients are served plaintext (on a private network) may
// still encrypt and authenticate Raft with files of its own.
TEST(PeerPlaneConfigTest, PeerFilesAloneTurnOnMutualTls) {
  absl::StatusOr<std::string> pki = testing::MakeTestPki();
  ASSERT_TRUE(pki.ok()) << pki.status();
  SecurityConfig security;  // no client TLS, no --insecure
  absl::SetFlag(&FLAGS_peer_tls_cert_file, *pki + "/server.pem");
  absl::SetFlag(&FLAGS_peer_tls_key_file, *pki + "/server.key");
  absl::StatusOr<std::shared_ptr<PeerPlane>> no_ca =
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr);
  EXPECT_TRUE(absl::StrContains(no_ca.status().message(), "--peer_tls_ca_file"))
      << no_ca.status();
  absl::SetFlag(&FLAGS_peer_tls_ca_file, *pki + "/ca.pem");
  EXPECT_TRUE(
      PeerPlaneFromFlags(security, "10.1.2.3:7001", kLogBudget, nullptr).ok());
  absl::SetFlag(&FLAGS_peer_tls_cert_file, std::string());
  absl::SetFlag(&FLAGS_peer_tls_key_file, std::string());
  absl::SetFlag(&FLAGS_peer_tls_ca_file, std::string());
  std::filesystem::remove_all(*pki);
}

}  // namespace
}  // namespace dedup
