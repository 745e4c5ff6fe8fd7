// A group member's disk fills up: the group goes on and its replicas stay
// identical. Node 1's data dir is a small tmpfs the test mounts (root only;
// skipped otherwise) and fills with a file.
//
// What is at stake: libraft 0.15 mishandles a failed append (a leader
// proposes its next entry at the same index in the same term, so replicas
// diverge; a follower writes later entries at shifted indexes) and a failed
// apply (a follower's Raft stops for good). So a leader below the free-space
// floor refuses writes and hands leadership on, and a node whose append or
// apply fails anyway stops (exit code 6) to be restarted once it has room.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace dedup {
namespace {

using HealthStatus = ::grpc::health::v1::HealthCheckResponse;

constexpr char kTmpfsSize[] = "size=160m";
constexpr int kFloorMib = 48;

uint64_t FreeBytes(const std::string& path) {
  struct statvfs fs;
  if (statvfs(path.c_str(), &fs) != 0) return 0;
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

class DiskFullGroupTest : public ClusterTest {
 protected:
  // `subdir`: where in node 1's data dir the tmpfs goes ("" for all of it).
  explicit DiskFullGroupTest(std::string subdir = "",
                             const char* size = kTmpfsSize)
      : ClusterTest({absl::StrCat("--min_free_disk_mb=", kFloorMib),
                     "--memory_budget_mb=16"}),
        subdir_(std::move(subdir)),
        size_(size) {}

  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the test mounts a small tmpfs to fill";
    }
    mount_point_ = cluster_.data_dir(1) + subdir_;
    std::filesystem::create_directories(mount_point_);
    ASSERT_EQ(mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, size_), 0)
        << "mount tmpfs: " << std::strerror(errno);
    mounted_ = true;
    ClusterTest::SetUp();
  }

  void TearDown() override {
    if (!mounted_) return;
    for (int id = 1; id <= cluster_.size(); ++id) {
      if (cluster_.running(id)) cluster_.Kill(id);
    }
    umount2(mount_point_.c_str(), MNT_DETACH);
  }

  // Leaves `keep_bytes` free on node 1's filesystem (a file beside its data).
  void Fill(uint64_t keep_bytes) {
    const std::string path = mount_point_ + "/filler";
    const uint64_t free_bytes = FreeBytes(mount_point_);
    ASSERT_GT(free_bytes, keep_bytes);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(posix_fallocate(fd, 0, free_bytes - keep_bytes), 0);
    close(fd);
  }
  void Unfill() { std::filesystem::remove(mount_point_ + "/filler"); }

  void TransferTo(int id) {
    v1::TransferLeadershipRequest transfer;
    transfer.set_node_id(id);
    v1::TransferLeadershipResponse transferred;
    const grpc::Status s = CallService<v1::Cluster>(
        cluster_.client_address(leader_),
        &v1::Cluster::Stub::TransferLeadership, transfer, &transferred);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(transferred.leader_id(), static_cast<uint64_t>(id));
    leader_ = id;
  }

  // Polls node `id`'s standard health status (service "") for up to 5 s.
  bool HealthBecomes(int id, HealthStatus::ServingStatus want) {
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
        cluster_.client_address(id), grpc::InsecureChannelCredentials()));
    HealthStatus::ServingStatus got = HealthStatus::UNKNOWN;
    for (int i = 0; i < 100; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(2));
      HealthStatus response;
      if (stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response)
              .ok()) {
        got = response.status();
        if (got == want) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "node " << id << " health " << got << ", want " << want;
    return false;
  }

  // One Begin straight to `id` (no redirects, no retries).
  grpc::Status BeginAt(int id, const std::string& key) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::BeginResponse response;
    return cluster_.DedupStub(id)->Begin(&context, BeginOf(key, "w"),
                                         &response);
  }

  // Begins and Completes `n` keys whose results are `result_bytes` long,
  // through node `via` (following redirects); returns what was acknowledged.
  std::map<std::string, std::pair<uint64_t, std::string>> WriteBig(
      int via, int n, const std::string& prefix, size_t result_bytes) {
    std::map<std::string, std::pair<uint64_t, std::string>> done;
    for (int i = 0; i < n; ++i) {
      const std::string key = absl::StrCat(prefix, i);
      v1::BeginResponse begun;
      grpc::Status s = Call(cluster_.client_address(via),
                            &v1::Dedup::Stub::Begin, BeginOf(key, "w"), &begun);
      if (!s.ok()) continue;
      v1::CompleteRequest complete;
      complete.set_namespace_("cluster");
      complete.set_key(key);
      complete.set_fence(begun.fence());
      complete.set_outcome(v1::SUCCESS);
      complete.set_result(std::string(result_bytes, 'a' + i % 26));
      v1::CompleteResponse completed;
      s = Call(cluster_.client_address(via), &v1::Dedup::Stub::Complete,
               complete, &completed);
      if (s.ok() && completed.status() == v1::CompleteResponse::OK) {
        done[key] = {begun.fence(), complete.result()};
      }
    }
    return done;
  }

  // Every acknowledged key answers DUPLICATE with its fence and result
  // through `via`, one call each (a batch of big results would be cut to
  // the response budget). Failures name the key only.
  void ExpectAcked(
      int via,
      const std::map<std::string, std::pair<uint64_t, std::string>>& acked) {
    int wrong = 0;
    for (const auto& [key, want] : acked) {
      v1::BeginResponse got;
      const grpc::Status s =
          Call(cluster_.client_address(via), &v1::Dedup::Stub::Begin,
               BeginOf(key, "someone-else"), &got);
      if (!s.ok() || got.status() != v1::BeginResponse::DUPLICATE ||
          got.fence() != want.first || got.result() != want.second) {
        if (++wrong <= 5) {
          ADD_FAILURE() << key << ": " << s.error_message() << " status "
                        << got.status() << " fence " << got.fence();
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "of " << acked.size() << " acknowledged";
  }

  const std::string subdir_;
  const char* const size_;
  std::string mount_point_;
  bool mounted_ = false;
};

TEST_F(DiskFullGroupTest, LeaderBelowTheFloorHandsLeadershipOn) {
  if (leader_ != 1) ASSERT_NO_FATAL_FAILURE(TransferTo(1));
  auto acked = WriteBig(1, 50, "before-", 4096);
  ASSERT_EQ(acked.size(), 50u);

  // Below the floor, with room left for the log: node 1 refuses writes and
  // gives up leadership instead of running into a full disk.
  Fill((kFloorMib - 16) << 20);
  const grpc::Status refused = BeginAt(1, "refused");
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(refused.error_message().find("storage cannot write"),
            std::string::npos)
      << refused.error_message();
  int leader = 1;
  for (int i = 0; i < 100 && leader == 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    absl::StatusOr<int> now = cluster_.WaitForLeader();
    if (now.ok()) leader = *now;
  }
  ASSERT_NE(leader, 1) << "node 1 kept leading below its floor";
  EXPECT_TRUE(cluster_.running(1));
  // Its health says so, whatever its role; the others' does not.
  EXPECT_TRUE(HealthBecomes(1, HealthStatus::NOT_SERVING));
  EXPECT_TRUE(HealthBecomes(leader, HealthStatus::SERVING));

  // The group goes on under the new leader (node 1 follows: it has room for
  // the log), and every acknowledged result stays.
  auto during = WriteBig(leader, 50, "during-", 4096);
  EXPECT_EQ(during.size(), 50u);
  acked.merge(during);
  Unfill();
  EXPECT_TRUE(HealthBecomes(1, HealthStatus::SERVING));
  ExpectAcked(leader, acked);
  ExpectIdenticalReplicas();
  EXPECT_TRUE(cluster_.running(1));
}

TEST_F(DiskFullGroupTest, FollowerOutOfDiskStopsAndRejoinsIdentical) {
  if (leader_ == 1) ASSERT_NO_FATAL_FAILURE(TransferTo(2));
  auto acked = WriteBig(leader_, 20, "before-", 4096);
  ASSERT_EQ(acked.size(), 20u);

  // No room at all: node 1's next log segment or table cannot be written.
  // It stops (exit 6, saying why) instead of failing silently or writing
  // its log at the wrong place; the other two go on.
  Fill(0);
  auto during = WriteBig(leader_, 400, "during-", 64 << 10);
  EXPECT_EQ(during.size(), 400u) << "the group stalled with one full member";
  acked.merge(during);
  testing::ServerProcess* node1 = cluster_.process(1);
  ASSERT_TRUE(node1->WaitForExit(std::chrono::seconds(30)))
      << "node 1 went on with a full disk";
  EXPECT_EQ(node1->exit_code(), 6);
  EXPECT_NE(node1->captured_stderr().find("FATAL"), std::string::npos)
      << node1->captured_stderr();

  // Room again: restarted, it catches up and holds the same state.
  Unfill();
  ASSERT_TRUE(cluster_.Start(1).ok());
  ExpectAcked(1, acked);
  ExpectIdenticalReplicas();
}

// Only node 1's Raft log dir is short of room (its data dir, which the
// floor watches, has plenty): a log append fails, and the node stops before
// libraft handles the failure (as a leader it would propose its next entry
// at the index that failed, as a follower write later entries at shifted
// indexes). Whichever role it had, the others go on, and once restarted it
// holds exactly their state.
class LogDiskFullTest : public DiskFullGroupTest,
                        public ::testing::WithParamInterface<bool> {
 protected:
  LogDiskFullTest() : DiskFullGroupTest("/raft", "size=40m") {}
};

TEST_P(LogDiskFullTest, NodeStopsAndRejoinsIdentical) {
  const bool leads = GetParam();
  if (leads && leader_ != 1) ASSERT_NO_FATAL_FAILURE(TransferTo(1));
  if (!leads && leader_ == 1) ASSERT_NO_FATAL_FAILURE(TransferTo(2));
  auto acked = WriteBig(1, 20, "before-", 4096);
  ASSERT_EQ(acked.size(), 20u);

  Fill(0);
  // Through another member (calls follow the leader, and a new one after
  // node 1 stops): about 25 MiB of results, more than node 1's log holds.
  auto during = WriteBig(leads ? 2 : leader_, 400, "during-", 64 << 10);
  testing::ServerProcess* node1 = cluster_.process(1);
  ASSERT_TRUE(node1->WaitForExit(std::chrono::seconds(30)))
      << "node 1 went on with a full log disk";
  EXPECT_EQ(node1->exit_code(), 6);
  EXPECT_NE(node1->captured_stderr().find("Raft log"), std::string::npos)
      << node1->captured_stderr();
  // Writes went on (a few around the stop may fail: their outcome was
  // unknown and the test does not retry them).
  EXPECT_GT(during.size(), 350u);
  acked.merge(during);

  Unfill();
  ASSERT_TRUE(cluster_.Start(1).ok());
  ExpectAcked(1, acked);
  ExpectIdenticalReplicas();
}

INSTANTIATE_TEST_SUITE_P(Roles, LogDiskFullTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Leader" : "Follower";
                         });

}  // namespace
}  // namespace dedup
