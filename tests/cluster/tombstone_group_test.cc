// Tombstones in a replicated group: every replica answers EXPIRED the same
// way, and a replica whose compactions shrank its expired records into
// tombstones still has the same state (digest) as one that did not.
#include <string>

#include "dedup/v1/admin.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

class TombstoneGroupTest : public ClusterTest {
 protected:
  TombstoneGroupTest() : ClusterTest({"--compaction_grace_s=0"}) {}

  v1::StatsResponse Stats(int id) {
    auto admin =
        v1::Admin::NewStub(testing::TestChannel(cluster_.client_address(id)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::StatsResponse response;
    const grpc::Status s = admin->Stats(&ctx, v1::StatsRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  // Compacts node `id`'s RocksDB (its own, not replicated).
  void Compact(int id) {
    auto admin =
        v1::Admin::NewStub(testing::TestChannel(cluster_.client_address(id)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(60));
    v1::CompactResponse response;
    const grpc::Status s =
        admin->Compact(&ctx, v1::CompactRequest(), &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
};

TEST_F(TombstoneGroupTest, ShrunkTombstonesKeepReplicasIdentical) {
  constexpr int kKeys = 40;
  int64_t last_expiry = 0;
  for (int i = 0; i < kKeys; ++i) {
    v1::BeginRequest begin = BeginOf(absl::StrCat("t", i), "w");
    begin.set_ttl_s(1);
    begin.set_lease_ms(100);
    v1::BeginResponse begun;
    ASSERT_TRUE(Call(cluster_.client_address(leader_), &v1::Dedup::Stub::Begin,
                     begin, &begun)
                    .ok());
    v1::CompleteRequest complete;
    complete.set_namespace_("cluster");
    complete.set_key(begin.key());
    complete.set_fence(begun.fence());
    complete.set_outcome(v1::SUCCESS);
    complete.set_result(std::string(2000, 'r'));
    v1::CompleteResponse completed;
    ASSERT_TRUE(Call(cluster_.client_address(leader_),
                     &v1::Dedup::Stub::Complete, complete, &completed)
                    .ok());
    ASSERT_EQ(completed.status(), v1::CompleteResponse::OK);
    last_expiry = std::max<int64_t>(last_expiry, completed.expires_at());
  }
  const int64_t wait_ms =
      last_expiry -
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count() +
      100;
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::max<int64_t>(wait_ms, 0)));
  // An entry after expiry moves the replicated clock past it.
  v1::BeginResponse late;
  ASSERT_TRUE(Call(cluster_.client_address(leader_), &v1::Dedup::Stub::Begin,
                   BeginOf("t0", "late"), &late)
                  .ok());
  EXPECT_EQ(late.status(), v1::BeginResponse::EXPIRED);

  // Once every replica has applied that entry, one follower shrinks its
  // expired records; the others keep them whole.
  ExpectIdenticalReplicas();
  const int follower = leader_ == 1 ? 2 : 1;
  Compact(follower);
  EXPECT_EQ(Stats(follower).tombstones_made(), static_cast<uint64_t>(kKeys));
  EXPECT_EQ(Stats(leader_).tombstones_made(), 0u);
  ExpectIdenticalReplicas();
  absl::StatusOr<std::vector<v1::DigestResponse>> digests =
      cluster_.ConvergedDigests();
  ASSERT_TRUE(digests.ok()) << digests.status();
  EXPECT_EQ(digests->front().live_records(), 0u);

  // The follower, made leader, answers from its shrunk tombstones the same.
  v1::TransferLeadershipRequest transfer;
  transfer.set_node_id(follower);
  v1::TransferLeadershipResponse transferred;
  ASSERT_TRUE(CallService<v1::Cluster>(cluster_.client_address(leader_),
                                       &v1::Cluster::Stub::TransferLeadership,
                                       transfer, &transferred)
                  .ok());
  for (int i = 1; i < kKeys; i += 7) {
    v1::BeginResponse r;
    ASSERT_TRUE(Call(cluster_.client_address(follower), &v1::Dedup::Stub::Begin,
                     BeginOf(absl::StrCat("t", i), "late"), &r)
                    .ok());
    EXPECT_EQ(r.status(), v1::BeginResponse::EXPIRED) << i;
    EXPECT_TRUE(r.result().empty());
  }
  ExpectIdenticalReplicas();
}

}  // namespace
}  // namespace dedup
