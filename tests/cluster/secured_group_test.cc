// A group with TLS and tenants: clients need a credential on every node, and
// nodes copy snapshots from each other over TLS with their own operator
// token (--peer_token_file), so a lagging follower still catches up.
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/channel_security.h"
#include "gtest/gtest.h"
#include "replication/peer_plane.h"
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

// Raft peers use mTLS plus the operator token: the group elects, takes
// writes and fails over with every peer connection authenticated.
TEST_F(SecuredGroupTest, AuthenticatedPeersFailOverWhenTheLeaderIsKilled) {
  const auto before = BeginAndComplete(leader_, 200, "tls-a");
  const int old_leader = leader_;
  cluster_.Kill(old_leader);
  absl::StatusOr<int> leader = cluster_.WaitForLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_NE(*leader, old_leader);
  ExpectDuplicates(*leader, before);
  const auto after = BeginAndComplete(*leader, 200, "tls-b");
  ASSERT_TRUE(cluster_.Start(old_leader).ok());
  ExpectDuplicates(old_leader, after);
  ExpectIdenticalReplicas();
}

// Dials node 1's Raft port as a peer would, with `cert` and `token`
// claiming `node_id`: the fd handed over, or -1 when refused.
int DialRaftPort(const std::string& raft_address, const std::string& cert,
                 const std::string& token, uint64_t node_id) {
  absl::StatusOr<std::shared_ptr<PeerTls>> tls = PeerTls::FromFiles(
      {Pki(cert + ".pem"), Pki(cert + ".key"), Pki("ca.pem")});
  EXPECT_TRUE(tls.ok()) << tls.status();
  PeerPlaneOptions options;
  options.listen_address = "127.0.0.1:0";
  options.tls = *tls;
  options.token = token;
  absl::StatusOr<std::shared_ptr<PeerPlane>> plane =
      PeerPlane::Create(std::move(options));
  EXPECT_TRUE(plane.ok());
  absl::Mutex mu;
  std::optional<int> result;
  PeerPlane::Dial dial;
  dial.self_id = node_id;
  dial.self_address = "127.0.0.1:1";
  dial.peer_address = raft_address;
  (*plane)->Connect(dial, [&](int fd) {
    absl::MutexLock lock(&mu);
    result = fd;
  });
  int fd;
  {
    absl::MutexLock lock(&mu);
    auto done = [&] { return result.has_value(); };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10)));
    fd = result.value_or(-1);
  }
  if (fd >= 0) close(fd);
  (*plane)->Stop();
  return fd;
}

TEST_F(SecuredGroupTest, RaftPortRefusesPeersWithoutAnOperatorToken) {
  const std::string& raft = cluster_.raft_address(1);
  // A certificate of the peer CA is not enough: the token decides.
  EXPECT_EQ(DialRaftPort(raft, "client-ops", "", 2), -1);
  EXPECT_EQ(DialRaftPort(raft, "client-ops", testing::kBillingToken, 2), -1);
  // The operator's token from a node id outside the group.
  EXPECT_EQ(DialRaftPort(raft, "client-ops", testing::kOpsToken, 9), -1);
  // Nor is a token enough without a certificate of the peer CA.
  EXPECT_EQ(DialRaftPort(raft, "client-rogue", testing::kOpsToken, 2), -1);
  // What the group's own nodes present is accepted.
  EXPECT_GE(DialRaftPort(raft, "server", testing::kOpsToken, 2), 0);
  // The group is unharmed.
  const auto keys = BeginAndComplete(leader_, 20, "after-strangers");
  ExpectDuplicates(leader_, keys);
}

// Authorization comes before routing on every node: a follower refuses
// another tenant's namespace as the leader does (PERMISSION_DENIED: unary
// calls whole, batches per item), and still names the leader for the
// caller's own namespaces.
TEST_F(SecuredGroupTest, EveryNodeRefusesForeignNamespacesBeforeRouting) {
  auto deadline = [](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
  };
  for (int id = 1; id <= 3; ++id) {
    SCOPED_TRACE(absl::StrCat("node ", id, id == leader_ ? " (leader)" : ""));
    auto stub = v1::Dedup::NewStub(
        Channels("billing.token")(cluster_.client_address(id)));
    v1::BeginRequest begin;
    begin.set_namespace_("ops:x");
    begin.set_key("k");
    begin.set_args_hash("h");
    {
      grpc::ClientContext ctx;
      deadline(&ctx);
      v1::BeginResponse response;
      EXPECT_EQ(stub->Begin(&ctx, begin, &response).error_code(),
                grpc::StatusCode::PERMISSION_DENIED);
    }
    v1::BeginBatchRequest begins;
    *begins.add_items() = begin;
    *begins.add_items() = begin;
    begins.mutable_items(1)->set_key("k2");
    {
      grpc::ClientContext ctx;
      deadline(&ctx);
      v1::BeginBatchResponse response;
      const grpc::Status s = stub->BeginBatch(&ctx, begins, &response);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_EQ(response.items_size(), 2);
      for (const auto& item : response.items()) {
        EXPECT_EQ(item.error().code(), grpc::StatusCode::PERMISSION_DENIED)
            << item.error().message();
      }
    }
    v1::CompleteBatchRequest completes;
    v1::CompleteRequest* complete = completes.add_items();
    complete->set_namespace_("ops:x");
    complete->set_key("k");
    complete->set_fence(1);
    complete->set_outcome(v1::SUCCESS);
    {
      grpc::ClientContext ctx;
      deadline(&ctx);
      v1::CompleteBatchResponse response;
      const grpc::Status s = stub->CompleteBatch(&ctx, completes, &response);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_EQ(response.items_size(), 1);
      EXPECT_EQ(response.items(0).error().code(),
                grpc::StatusCode::PERMISSION_DENIED);
    }
    v1::CheckpointBatchRequest checkpoints;
    v1::CheckpointRequest* checkpoint = checkpoints.add_items();
    checkpoint->set_namespace_("ops:x");
    checkpoint->set_key("k");
    checkpoint->set_fence(1);
    checkpoint->set_step("s1");
    {
      grpc::ClientContext ctx;
      deadline(&ctx);
      v1::CheckpointBatchResponse response;
      const grpc::Status s =
          stub->CheckpointBatch(&ctx, checkpoints, &response);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_EQ(response.items_size(), 1);
      EXPECT_EQ(response.items(0).error().code(),
                grpc::StatusCode::PERMISSION_DENIED);
    }
    // One item of its own: a follower routes the batch to the leader (here
    // by naming it: the call says it was forwarded already).
    begins.mutable_items(1)->set_namespace_("billing:x");
    grpc::ClientContext ctx;
    deadline(&ctx);
    if (id != leader_) ctx.AddMetadata("dedup-forwarded", "test");
    v1::BeginBatchResponse response;
    const grpc::Status mixed = stub->BeginBatch(&ctx, begins, &response);
    if (id == leader_) {
      ASSERT_TRUE(mixed.ok()) << mixed.error_message();
      EXPECT_EQ(response.items(0).error().code(),
                grpc::StatusCode::PERMISSION_DENIED);
      EXPECT_EQ(response.items(1).response().status(),
                v1::BeginResponse::STARTED);
    } else {
      EXPECT_EQ(mixed.error_code(), grpc::StatusCode::UNAVAILABLE)
          << mixed.error_message();
    }
  }
}

// A follower forwards a call with the caller's own token, so the leader
// authorizes the caller; a caller known by its client certificate cannot be
// forwarded (the certificate does not travel) and is named the leader.
TEST_F(SecuredGroupTest, AFollowerForwardsWithTheCallersCredentials) {
  const int follower = leader_ == 1 ? 2 : 1;
  const std::string address = cluster_.client_address(follower);
  v1::BeginRequest own = BeginOf("fwd", "o");
  own.set_namespace_("billing:x");
  auto begin = [&](const ChannelFactory& channels, const v1::BeginRequest& r,
                   std::string* hint) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    v1::BeginResponse response;
    grpc::Status s =
        v1::Dedup::NewStub(channels(address))->Begin(&ctx, r, &response);
    if (s.ok()) EXPECT_EQ(response.status(), v1::BeginResponse::STARTED);
    *hint = LeaderHint(ctx);
    return s;
  };
  std::string hint;
  grpc::Status s = begin(Channels("billing.token"), own, &hint);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(hint, cluster_.client_address(leader_));
  v1::BeginRequest foreign = own;
  foreign.set_namespace_("ops:x");
  EXPECT_EQ(begin(Channels("billing.token"), foreign, &hint).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(begin(Channels(""), own, &hint).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  absl::StatusOr<ChannelSecurity> certificate = ChannelSecurityFromFiles(
      Pki("ca.pem"), Pki("client-billing.pem"), Pki("client-billing.key"), "");
  ASSERT_TRUE(certificate.ok()) << certificate.status();
  own.set_key("fwd-cert");
  s = begin(SecureChannelFactory(*certificate), own, &hint);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(hint, cluster_.client_address(leader_));
}

}  // namespace
}  // namespace dedup
